ALTER TABLE mandates DROP COLUMN max_quantity;
