"""The example Prometheus alerting rules (examples/ops/prometheus-alerts.yml): they load
(``promtool check rules``), they fire when they should and only then (``promtool test
rules`` with examples/ops/prometheus-alerts.test.yml), and they name only metrics that
:class:`acmecerts.metrics.PrometheusMetrics` exports, with their labels."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from acmecerts.metrics import PrometheusMetrics

OPS = Path(__file__).resolve().parents[2] / "examples" / "ops"
RULES = OPS / "prometheus-alerts.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found, "promtool is missing (scripts/test.sh installs Debian's prometheus)"
    return subprocess.run(
        [found, *args], cwd=OPS, capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_check_rules_accepts_the_alerting_rules() -> None:
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_unit_tests_of_the_alerting_rules_pass() -> None:
    result = promtool("test", "rules", "prometheus-alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    # every alert is exercised by the unit tests, firing at least once
    tests = yaml.safe_load((OPS / "prometheus-alerts.test.yml").read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    alerts = {rule["alert"] for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]}
    assert fired == alerts


def test_the_rules_name_only_metrics_and_labels_the_manager_exports() -> None:
    exported = PrometheusMetrics().render().decode()
    families = set(re.findall(r"^# TYPE (\S+) ", exported, flags=re.MULTILINE))
    text = RULES.read_text()
    used = set(re.findall(r"\bacmecerts_[a-z_]+\b", text))
    assert used, "no metric named"
    assert used <= families, used - families
    # the label values the rules select on are ones the metrics use
    assert set(re.findall(r'outcome="([a-z_]+)"', text)) <= {
        "obtained",
        "failed",
        "deferred",
        "rate_limited",
        "cancelled",
    }
