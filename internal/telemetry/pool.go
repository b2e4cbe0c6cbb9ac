package telemetry

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector reads pgxpool.Stat at scrape time, so the numbers are never
// stale and nothing runs between scrapes.
type poolCollector struct {
	pool *pgxpool.Pool

	acquired, idle, constructing, total, max  *prometheus.Desc
	acquires, emptyAcquires, canceledAcquires *prometheus.Desc
	acquireSeconds, newConns                  *prometheus.Desc
}

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("billingd_db_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		pool:             pool,
		acquired:         desc("acquired_conns", "Connections currently in use."),
		idle:             desc("idle_conns", "Idle connections in the pool."),
		constructing:     desc("constructing_conns", "Connections being opened."),
		total:            desc("total_conns", "All connections of the pool."),
		max:              desc("max_conns", "The pool's size limit."),
		acquires:         desc("acquires_total", "Successful connection acquisitions."),
		emptyAcquires:    desc("empty_acquires_total", "Acquisitions that had to wait because no connection was idle."),
		canceledAcquires: desc("canceled_acquires_total", "Acquisitions given up because their context ended."),
		acquireSeconds:   desc("acquire_seconds_total", "Time spent acquiring connections."),
		newConns:         desc("new_conns_total", "Connections opened."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.constructing, c.total, c.max,
		c.acquires, c.emptyAcquires, c.canceledAcquires, c.acquireSeconds, c.newConns} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.acquired, float64(s.AcquiredConns()))
	gauge(c.idle, float64(s.IdleConns()))
	gauge(c.constructing, float64(s.ConstructingConns()))
	gauge(c.total, float64(s.TotalConns()))
	gauge(c.max, float64(s.MaxConns()))
	counter(c.acquires, float64(s.AcquireCount()))
	counter(c.emptyAcquires, float64(s.EmptyAcquireCount()))
	counter(c.canceledAcquires, float64(s.CanceledAcquireCount()))
	counter(c.acquireSeconds, s.AcquireDuration().Seconds())
	counter(c.newConns, float64(s.NewConnsCount()))
}
