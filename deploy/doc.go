// Package deploy holds what the Manager ships for running it in production
// and is not Go: Prometheus alerts (prometheus/alerts.yaml), a Grafana
// dashboard (grafana/), a compose demo (compose/). Its test checks them:
// the alerts with promtool, the dashboard's queries against the metrics the
// Manager documents.
package deploy
