-- A standing mandate may cover change_seats within the most seats the
-- person set (contract §13, §15); 0: it covers no change of seats.
ALTER TABLE mandates ADD COLUMN max_quantity bigint NOT NULL DEFAULT 0
    CHECK (max_quantity >= 0 AND max_quantity <= 10000);
