// Package grafana holds Tandem's Grafana dashboard (tandem-node.json): node usage against the
// reclaimable capacity Tandem publishes, usage and CFS throttling per QoS class, pressure stall
// information, run-queue latency and CPI, and the suppress and evict actions. Its tests validate the
// dashboard against dashboard.schema.json, check its structure, and check that every query reads a
// metric Tandem exports; they also check the Prometheus scrape jobs in ../prometheus/scrape.yaml.
//
// Import the dashboard in Grafana (Dashboards → New → Import) or provision the file; pick the
// Prometheus data source that scrapes the jobs of scrape.yaml.
package grafana
