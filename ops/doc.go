// Package ops holds what the people who run rebill load into their tools:
// the Grafana dashboard (grafana/rebill.json) and the Prometheus alert
// rules (prometheus/alerts.yml, unit-tested by prometheus/alerts_test.yml).
// They are embedded here so that tests can check them against the metrics
// the service really exports.
package ops

import _ "embed"

// Dashboard is the Grafana dashboard (JSON model, datasource chosen by its
// "datasource" variable).
//
//go:embed grafana/rebill.json
var Dashboard []byte

// AlertRules is the Prometheus rule file.
//
//go:embed prometheus/alerts.yml
var AlertRules []byte

// AlertTests is the rule file's `promtool test rules` input.
//
//go:embed prometheus/alerts_test.yml
var AlertTests []byte
