#!/usr/bin/env bash
# What a pod that ends pays for its Watcher: create → phase Succeeded of a pod whose app runs 2 s
# (`restartPolicy: Never`), PODS pods one after another (default 6), with no Watcher, with
# README's busybox Watcher (deploy/samples/watcher.yaml: a command) and with README's agent
# (deploy/samples/app-watcher.yaml), on a real node. Prints each pod's time, the p50, min and
# max of each kind, and the sidecars' restart counts (0 expected).
#
#   KUBECONFIG=$(../shared/k8s/cluster-up 1.36 6443)
#   ../shared/k8s/node-up 1.36 6443
#   ../shared/k8s/node-image watcher-agent:0.1.0 target/debug/watcher-agent --user 65532
#   ../shared/k8s/node-image watcher-supervise:0.1.0 target/supervise/watcher-supervise --user 65532 -- ended
#   benches/pods-that-end.sh [PODS]
#
# It starts the operator (OPERATOR, default target/debug/watcher-operator) with its default flags
# as README.md runs it, in a namespace of its own, and deletes what it created. NATIVE=Never
# injects regular sidecars on a server with native ones. Each time is measured by the client
# (before `kubectl create`, after `kubectl wait` returns): the same overhead in every column, so
# the differences are what the Watcher costs.
set -euo pipefail
cd "$(dirname "$0")/.."
PODS="${1:-6}"
OPERATOR="${OPERATOR:-target/debug/watcher-operator}"
NATIVE="${NATIVE:-Auto}"
NS="bench-end-$$"
OPERATOR_NS="bench-end-op-$$"
: "${KUBECONFIG:?KUBECONFIG: a cluster with a node}"
[ -x "$OPERATOR" ] || { echo "no operator binary at $OPERATOR (cargo build)" >&2; exit 2; }
kubectl get nodes -o name | grep -q . || { echo "the cluster has no node (../shared/k8s/node-up)" >&2; exit 2; }

LOG="$(mktemp)"
cleanup() {
  [ -n "${OPERATOR_PID:-}" ] && kill -TERM "$OPERATOR_PID" 2>/dev/null && wait "$OPERATOR_PID" 2>/dev/null
  kubectl delete namespace "$NS" "$OPERATOR_NS" --wait=false >/dev/null 2>&1 || true
  rm -f "$LOG"
}
trap cleanup EXIT

"$OPERATOR" crds | kubectl apply --server-side --force-conflicts -f - >/dev/null
kubectl create namespace "$OPERATOR_NS" >/dev/null
kubectl create namespace "$NS" >/dev/null
"$OPERATOR" run --leader-election=false --namespace "$OPERATOR_NS" --health-addr 127.0.0.1:18080 --metrics-addr 127.0.0.1:0 \
  --webhook-addr 0.0.0.0:18443 --webhook-url https://127.0.0.1:18443/mutate >"$LOG" 2>&1 &
OPERATOR_PID=$!
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:18080/readyz >/dev/null 2>&1 && break
  sleep 0.2
done
curl -sf http://127.0.0.1:18080/readyz >/dev/null || { echo "the operator did not get ready:" >&2; tail -20 "$LOG" >&2; exit 1; }

kubectl apply -n "$NS" -f deploy/samples/agent-rbac.yaml >/dev/null
for watcher in watcher app-watcher; do
  kubectl apply -n "$NS" -f "deploy/samples/$watcher.yaml" >/dev/null
done
kubectl patch -n "$NS" watcher/log-watcher watcher/app-watcher --type=merge \
  -p "{\"spec\":{\"nativeSidecar\":\"$NATIVE\"}}" >/dev/null
kubectl wait -n "$NS" --for=condition=Ready watcher/log-watcher watcher/app-watcher --timeout=60s >/dev/null

# pod NAME WATCHER: the pod (WATCHER "-": none), its app writing a line to the shared log and
# sleeping 2 s, as restricted as README's Job.
pod() {
  local inject=""
  [ "$2" = - ] || inject="annotations: {watcher.dev/inject: $2}"
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  $inject
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 65534, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: app
      image: busybox:1.36
      imagePullPolicy: IfNotPresent
      command: [sh, -c, "mkdir -p /var/log/app; echo \"\$(date -u +%FT%TZ) ERROR once\" >> /var/log/app/app.log; sleep 2"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: logs, mountPath: /var/log/app}]
  volumes: [{name: logs, emptyDir: {}}]
EOF
}

now() { date +%s.%N; }
declare -A TIMES
KINDS=(none busybox agent)
for i in $(seq 1 "$PODS"); do
  for kind in "${KINDS[@]}"; do
    case $kind in none) watcher=- ;; busybox) watcher=log-watcher ;; agent) watcher=app-watcher ;; esac
    name="$kind-$i"
    start=$(now)
    pod "$name" "$watcher" | kubectl create -n "$NS" -f - >/dev/null
    kubectl wait -n "$NS" "pod/$name" --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null
    end=$(now)
    took=$(echo "$end - $start" | bc)
    restarts=$(kubectl get pod -n "$NS" "$name" -o \
      jsonpath='{range .status.containerStatuses[*]}{.name}={.restartCount} {end}{range .status.initContainerStatuses[*]}{.name}={.restartCount} {end}')
    printf '%-10s %6.2f s   %s\n' "$name" "$took" "$restarts"
    TIMES[$kind]="${TIMES[$kind]:-} $took"
    kubectl delete pod -n "$NS" "$name" --wait=false >/dev/null
  done
done

echo
printf '%-8s %7s %7s %7s %9s\n' kind p50 min max "p50 - none"
p50() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
base=$(echo "${TIMES[none]}" | p50)
for kind in "${KINDS[@]}"; do
  sorted=$(echo "${TIMES[$kind]}" | tr ' ' '\n' | grep . | sort -n)
  median=$(echo "${TIMES[$kind]}" | p50)
  printf '%-8s %6.2fs %6.2fs %6.2fs %+8.2fs\n' "$kind" "$median" "$(head -1 <<<"$sorted")" "$(tail -1 <<<"$sorted")" \
    "$(echo "$median - $base" | bc)"
done
echo "(kube-apiserver $(kubectl version -o json 2>/dev/null | python3 -c 'import json,sys; v=json.load(sys.stdin)["serverVersion"]; print(v["gitVersion"])'), nativeSidecar $NATIVE, $PODS pods each)"
