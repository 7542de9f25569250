#!/usr/bin/env bash
# Capture the CLI's output, the server's answers and the chart's rendering for the examples, so a
# restructured tree can be compared byte for byte. Run it on the tree before a change and after:
#   scripts/snapshot_outputs.sh . /tmp/before; (change); scripts/snapshot_outputs.sh . /tmp/after
#   diff -r /tmp/before /tmp/after
set -u
repo=$(cd "$1" && pwd); out=$(mkdir -p "$2" && cd "$2" && pwd)
cd "$repo"
gp=".venv/bin/gpu-policy"
run() { local name=$1; shift; { "$@"; echo "exit=$?"; } >"$out/$name.out" 2>"$out/$name.err"; }
run help $gp --help
for c in review serve test plan inventory certs; do run "help-$c" $gp $c --help; done
for d in examples/clusters/*/; do
  n=$(basename "$d")
  run "review-$n-text" $gp review --policy "$d/policy.yaml" --nodes "$d/nodes.yaml" examples/manifests/*.yaml
  run "review-$n-json" $gp review --policy "$d/policy.yaml" --nodes "$d/nodes.yaml" -o json examples/manifests/*.yaml
  run "review-$n-yaml" $gp review --policy "$d/policy.yaml" --nodes "$d/nodes.yaml" -o yaml examples/manifests/*.yaml
  run "inventory-$n" $gp inventory --policy "$d/policy.yaml" --nodes "$d/nodes.yaml"
  run "inventory-$n-json" $gp inventory --policy "$d/policy.yaml" --nodes "$d/nodes.yaml" -o json
done
run review-default $gp review examples/manifests/*.yaml
run review-bad $gp review --policy /nonexistent.yaml examples/manifests/pod-no-gpu.yaml
tmp=$(mktemp -d)
run plan-seed003 env -C "$tmp" "$repo/$gp" plan --nodes $repo/examples/clusters/seed003-before/nodes.yaml --policy $repo/examples/clusters/seed003-before/policy.yaml --measurements $repo/examples/plan/measurements.yaml --configmap kube-system/time-slicing-config --write-dir plan
for f in "$tmp"/plan/*; do cp "$f" "$out/plan-file-$(basename "$f")"; done
run plan-seed003-json $gp plan --nodes examples/clusters/seed003-before/nodes.yaml --policy examples/clusters/seed003-before/policy.yaml --measurements examples/plan/measurements.yaml -o json
run test-suites $gp test examples/suites
run test-suites-json $gp test examples/suites -o json
rm -rf "$tmp"
# The server's answers through the Flask app (no TLS): every example AdmissionReview and fixture.
.venv/bin/python - "$out" <<'PY'
import json, sys, pathlib, glob
out = pathlib.Path(sys.argv[1])
from webhook.server.app import create_app
from webhook.server.settings import Settings
app = create_app(Settings())
c = app.test_client()
files = sorted(glob.glob("examples/*.json")) + sorted(glob.glob("tests/fixtures/admissionreviews/*/*.json"))
lines = []
for f in files:
    body = pathlib.Path(f).read_bytes()
    for ep in ("/mutate", "/validate"):
        r = c.post(ep, data=body, content_type="application/json")
        lines.append(f"{f} {ep} {r.status_code} {r.get_data(as_text=True)}")
for ep, body in (("/mutate", b"not json"), ("/validate", b"{}"), ("/mutate", b"[]")):
    r = c.post(ep, data=body, content_type="application/json")
    lines.append(f"bad {ep} {r.status_code} {r.get_data(as_text=True)}")
(out / "server-answers.txt").write_text("\n".join(lines) + "\n")
PY
# The chart, rendered with the real helm in its modes (certificates differ run to run in helm mode:
# rendered with cert-manager and existingSecret, which have no key material).
H=.cache/tools/helm
if [ -x "$H" ]; then
  $H template t charts/gpu-policy-webhook --namespace gpu-policy --set certificates.mode=certManager >"$out/chart-certmanager.yaml" 2>&1
  $H template t charts/gpu-policy-webhook --namespace gpu-policy --set certificates.mode=existingSecret --set certificates.existingSecret.name=s --set certificates.existingSecret.caBundle=Y2E= >"$out/chart-existing.yaml" 2>&1
  $H template t charts/gpu-policy-webhook --namespace gpu-policy --set certificates.mode=certManager --set replicaCount=3 --set networkPolicy.enabled=true --set serviceMonitor.enabled=true >"$out/chart-full.yaml" 2>&1
fi
echo "snapshot in $out"
# Durations vary run to run.
sed -i -E 's/ in [0-9.]+s$/ in Ns/' "$out"/test-suites*.out
