package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// promtool returns the path of promtool, or skips the test (Debian's
// prometheus package provides it; .ci/run installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus): the alert rules are not checked")
	}
	return p
}

// The alert rules parse and type-check.
func TestAlertRulesCheck(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(promtool(t), "check", "rules", "prometheus/alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// The alerts fire on the series their unit tests give them.
func TestAlertRulesFire(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(promtool(t), "test", "rules", "alerts_test.yaml")
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// Every metric the alerts and the dashboard query is one docs/operations.md
// documents (so neither drifts from the names the Manager exports).
func TestQueriesUseDocumentedMetrics(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile("grafana/norsk-manager.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exprs := string(alerts)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs += "\n" + tg.Expr
		}
	}
	name := regexp.MustCompile(`norsk_[a-z_]+`)
	for _, n := range name.FindAllString(exprs, -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")
		if !strings.Contains(string(doc), base) {
			t.Errorf("%s is queried but not documented in docs/operations.md", n)
		}
	}
}
