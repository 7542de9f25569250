{{/* Names, labels and the pieces several templates share. */}}

{{- define "gpu-policy-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: "<release>-<chart>", shortened to 63 characters (a DNS label). */}}
{{- define "gpu-policy-webhook.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-policy-webhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-policy-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-policy-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object: .selector (selector labels) and .component, for the release .root. */}}
{{- define "gpu-policy-webhook.commonLabels" -}}
helm.sh/chart: {{ include "gpu-policy-webhook.chart" .root }}
{{ .selector }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpu-policy-webhook.labels" -}}
{{- include "gpu-policy-webhook.commonLabels" (dict "root" . "selector" (include "gpu-policy-webhook.selectorLabels" .) "component" "admission-webhook") }}
{{- end }}

{{- define "gpu-policy-webhook.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-policy-webhook.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Service the API server calls; the serving certificate is made for its DNS names. */}}
{{- define "gpu-policy-webhook.serviceName" -}}
{{- include "gpu-policy-webhook.fullname" . }}
{{- end }}

{{/* DNS names of the Service, as the API server addresses it (<svc>.<ns>.svc) and shorter. */}}
{{- define "gpu-policy-webhook.dnsNames" -}}
{{- $svc := include "gpu-policy-webhook.serviceName" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* The Secret holding tls.crt and tls.key, whichever mode made it. */}}
{{- define "gpu-policy-webhook.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "existingSecret" }}
{{- required "certificates.existingSecret.name is required when certificates.mode=existingSecret" .Values.certificates.existingSecret.name }}
{{- else }}
{{- printf "%s-tls" (include "gpu-policy-webhook.fullname" .) }}
{{- end }}
{{- end }}

{{/* "true" when the server manages its certificates itself (certificates.mode=selfManaged). */}}
{{- define "gpu-policy-webhook.selfManaged" -}}
{{- if eq .Values.certificates.mode "selfManaged" }}true{{ end }}
{{- end }}

{{/* "true" when the server talks to the API server: to watch it, or for its certificates. */}}
{{- define "gpu-policy-webhook.usesApiServer" -}}
{{- if or .Values.server.watchCluster (include "gpu-policy-webhook.selfManaged" .) }}true{{ end }}
{{- end }}

{{/* The name of the serving Certificate in certManager mode (for cert-manager.io/inject-ca-from). */}}
{{- define "gpu-policy-webhook.servingCertificateName" -}}
{{- printf "%s-serving" (include "gpu-policy-webhook.fullname" .) }}
{{- end }}

{{- define "gpu-policy-webhook.policyConfigMapName" -}}
{{- if .Values.policy.existingConfigMap }}
{{- .Values.policy.existingConfigMap }}
{{- else }}
{{- printf "%s-policy" (include "gpu-policy-webhook.fullname" .) }}
{{- end }}
{{- end }}

{{- define "gpu-policy-webhook.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The rendered policy file. The device-plugin ConfigMap reference comes from
.Values.devicePlugin.configMapRef and is written to spec.devicePlugin.configMapRef: the
server watches exactly the ConfigMap the policy names, and the chart's Role allows reading
exactly that one, so both come from the same value.
*/}}
{{- define "gpu-policy-webhook.policy" -}}
{{- $spec := deepCopy (.Values.policy.spec | default dict) }}
{{- $dp := deepCopy (get $spec "devicePlugin" | default dict) }}
{{- $ref := .Values.devicePlugin.configMapRef }}
{{- if $ref.name }}
{{- if hasKey $dp "configMapRef" }}
{{- fail "policy.spec.devicePlugin.configMapRef is set by the chart from devicePlugin.configMapRef (which also decides what the RBAC Role may read): set that value instead." }}
{{- end }}
{{- $_ := set $dp "configMapRef" (dict "namespace" (required "devicePlugin.configMapRef.namespace is required with devicePlugin.configMapRef.name" $ref.namespace) "name" $ref.name) }}
{{- end }}
{{- $_ := set $spec "devicePlugin" $dp }}
{{- if .Values.quota.enabled }}
{{- /* GPU budgets (docs/quota.md): quota.enabled turns the policy's spec.quota on. */}}
{{- $quota := deepCopy (get $spec "quota" | default dict) }}
{{- $_ := set $quota "enabled" true }}
{{- $_ := set $spec "quota" $quota }}
{{- end }}
{{- if .Values.dra.enabled }}
{{- /* The classes the claim webhooks are sent are the classes the policy judges. */}}
{{- $dra := deepCopy (get $spec "dra" | default dict) }}
{{- if hasKey $dra "deviceClassSuffixes" }}
{{- fail "policy.spec.dra.deviceClassSuffixes is set by the chart from dra.deviceClassSuffixes (which also decides which claims the API server sends): set that value instead." }}
{{- end }}
{{- $_ := set $dra "deviceClassSuffixes" .Values.dra.deviceClassSuffixes }}
{{- if not (hasKey $dra "dualPublishedNodes") }}
{{- $_ := set $dra "dualPublishedNodes" .Values.dra.dualPublishedNodes }}
{{- end }}
{{- $_ := set $spec "dra" $dra }}
{{- end }}
{{- $policy := dict "apiVersion" "gpu-policy.io/v1alpha1" "kind" "SharingPolicy" "metadata" (dict "name" (include "gpu-policy-webhook.fullname" .)) "spec" $spec }}
{{- toYaml $policy }}
{{- end }}

{{/*
CEL for matchConditions: true when the pod spec at .spec (a CEL expression such as
"object.spec.template.spec") has a container or init container with a resource name in requests
or limits for which the CEL test .name (over r) holds. Every step is guarded with has(), because
the objects are untyped here and a missing field is an error (which the API server would answer
with the failurePolicy) rather than false.
*/}}
{{- define "gpu-policy-webhook.asksFor" -}}
{{- $spec := .spec }}
{{- $asks := printf "has(c.resources) && ((has(c.resources.requests) && c.resources.requests.exists(r, %s)) || (has(c.resources.limits) && c.resources.limits.exists(r, %s)))" .name .name }}
{{- printf "(has(%s.containers) && %s.containers.exists(c, %s)) || (has(%s.initContainers) && %s.initContainers.exists(c, %s))" $spec $spec $asks $spec $spec $asks }}
{{- end }}

{{/* CEL: the pod spec at the given path asks for an nvidia.com/* resource. */}}
{{- define "gpu-policy-webhook.asksForNvidia" -}}
{{- include "gpu-policy-webhook.asksFor" (dict "spec" . "name" "r.startsWith('nvidia.com/')") }}
{{- end }}

{{/*
CEL: the pod spec at the given path may ask for a GPU through DRA: it refers to claims
(spec.resourceClaims), or asks for a resource whose name has a "/". Kubernetes accepts in a
container's resources only the standard names, which have none (cpu, memory,
ephemeral-storage, hugepages-*), extended resource names (a domain outside kubernetes.io) and
deviceclass.resource.kubernetes.io/<class>: so this is every extended name, which is every name
a DeviceClass can serve through extendedResourceName, and every implicit class name. Which
extended names the classes serve is known only at run time (classes come and go), so no
narrower condition can be written at install time without missing some (docs/chart.md,
"DRA claims").
*/}}
{{- define "gpu-policy-webhook.mayUseDra" -}}
{{- printf "(has(%s.resourceClaims) && size(%s.resourceClaims) > 0) || %s" . . (include "gpu-policy-webhook.asksFor" (dict "spec" . "name" "r.contains('/')")) }}
{{- end }}

{{/*
"true" when the validating configuration judges what DRA serves: dra.enabled, and the server
watches the DRA objects that serve it (server.watchCluster).
*/}}
{{- define "gpu-policy-webhook.judgesDra" -}}
{{- if and .Values.dra.enabled .Values.server.watchCluster }}true{{ end }}
{{- end }}

{{/*
"true" when pods that ask for no GPU are sent too, for GPU isolation (docs/isolation.md): the
rendered policy's spec.isolation.mode is warn or enforce, or webhook.isolation.enabled says so.
*/}}
{{- define "gpu-policy-webhook.isolating" -}}
{{- $mode := "off" }}
{{- if not .Values.policy.existingConfigMap }}
{{- $mode = toString (dig "isolation" "mode" "off" .Values.policy.spec) }}
{{- end }}
{{- if or .Values.webhook.isolation.enabled (has $mode (list "warn" "enforce")) }}true{{ end }}
{{- end }}

{{/*
CEL: true when the toleration t tolerates the taint given as a dict (key, value, effect), as
the scheduler's TaintToleration filter decides: an empty effect matches every effect, an empty
key with Exists every key, Exists any value, Equal (the default) the same value.
*/}}
{{- define "gpu-policy-webhook.toleratesTaint" -}}
{{- $effect := printf "(!has(t.effect) || t.effect == '' || t.effect == '%s')" .effect }}
{{- $any := "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists')" }}
{{- $value := printf "((has(t.operator) && t.operator == 'Exists') || ((!has(t.operator) || t.operator == 'Equal') && (has(t.value) ? t.value : '') == '%s'))" (.value | default "") }}
{{- printf "%s && (%s || (has(t.key) && t.key == '%s' && %s))" $effect $any .key $value }}
{{- end }}

{{/*
CEL: true when the pod spec at .spec can be placed on a GPU node: it is bound by name
(spec.nodeName; the webhook checks which node), or it tolerates every taint of one of
webhook.isolation.gpuNodeTaints (an empty list, an untainted GPU node: every pod). The
namespaces the rendered policy exempts from isolation are left out, and so are pod UPDATEs.
*/}}
{{- define "gpu-policy-webhook.reachesGpuNode" -}}
{{- $spec := .spec }}
{{- $sets := list }}
{{- $everyPod := false }}
{{- range .root.Values.webhook.isolation.gpuNodeTaints }}
{{- if not . }}{{ $everyPod = true }}{{ end }}
{{- $each := list }}
{{- range . }}
{{- $each = append $each (printf "%s.tolerations.exists(t, %s)" $spec (include "gpu-policy-webhook.toleratesTaint" .)) }}
{{- end }}
{{- if $each }}
{{- $sets = append $sets (printf "(has(%s.tolerations) && %s)" $spec (join " && " $each)) }}
{{- end }}
{{- end }}
{{- $reach := "true" }}
{{- if not $everyPod }}
{{- $reach = join " || " (prepend $sets (printf "has(%s.nodeName)" $spec)) }}
{{- end }}
{{- if eq $spec "object.spec" }}
{{- /* A pod's containers cannot change after CREATE: its UPDATEs need no isolation review. */}}
{{- $reach = printf "request.operation == 'CREATE' && (%s)" $reach }}
{{- end }}
{{- $exempt := list }}
{{- if not .root.Values.policy.existingConfigMap }}
{{- $exempt = dig "isolation" "exemptNamespaces" (list "gpu-operator") .root.Values.policy.spec }}
{{- end }}
{{- if $exempt }}
{{- printf "!(request.namespace in %s) && (%s)" (toJson $exempt | replace "\"" "'") $reach }}
{{- else }}
{{- $reach }}
{{- end }}
{{- end }}

{{/*
A matchConditions list for the pod spec found at .spec ("object.spec.template.spec"),
guarded by has() on every step of that path below the object. Without GPU isolation only pods
that ask for an nvidia.com/* resource are sent; with it, also those that can be placed on a GPU
node (gpu-policy-webhook.reachesGpuNode). With .dra ("true": the validating entries of pod
templates while DRA is judged), also templates that may use DRA (gpu-policy-webhook.mayUseDra):
a template is judged as the pods it creates, and those pods would reach pod-claims.validate.
*/}}
{{- define "gpu-policy-webhook.matchConditions" -}}
{{- $steps := splitList "." .spec }}
{{- $prefix := first $steps }}
{{- $guards := list }}
{{- range rest $steps }}
{{- $prefix = printf "%s.%s" $prefix . }}
{{- $guards = append $guards (printf "has(%s)" $prefix) }}
{{- end -}}
{{- $asks := include "gpu-policy-webhook.asksForNvidia" .spec }}
{{- $what := "asks-for-nvidia-resource" }}
{{- /* GPU budgets (docs/quota.md): with quota.enabled the mutating webhook also charges pods
whose GPUs come from claims or from names a DeviceClass serves. */}}
{{- if or .dra (and .quota .root.Values.quota.enabled) }}
{{- /* Every nvidia.com/* name has a "/": mayUseDra covers asksForNvidia. */}}
{{- $asks = include "gpu-policy-webhook.mayUseDra" .spec }}
{{- $what = "asks-for-extended-resource-or-claims" }}
{{- end }}
{{- if include "gpu-policy-webhook.isolating" .root -}}
- name: {{ $what }}-or-reaches-gpu-node
  expression: {{ printf "%s && ((%s) || (%s))" (join " && " $guards) $asks (include "gpu-policy-webhook.reachesGpuNode" .) | quote }}
{{- else -}}
- name: {{ $what }}
  expression: {{ printf "%s && (%s)" (join " && " $guards) $asks | quote }}
{{- end }}
{{- end }}

{{/*
CEL: true when the DeviceClass name in the CEL expression given (e.g. "r.exactly.deviceClassName")
is one of dra.deviceClassSuffixes or ends in ".<suffix>": the GPU classes
(docs/dra-claims.md, "What the webhook checks").
*/}}
{{- define "gpu-policy-webhook.gpuDeviceClass" -}}
{{- $name := .name }}
{{- $tests := list }}
{{- range .suffixes }}
{{- $tests = append $tests (printf "%s == '%s' || %s.endsWith('.%s')" $name (trimAll "." .) $name (trimAll "." .)) }}
{{- end }}
{{- printf "(%s)" (join " || " $tests) }}
{{- end }}

{{/*
matchConditions for a ResourceClaimSpec at the given path (.spec: "object.spec" of a
ResourceClaim, "object.spec.spec" of a ResourceClaimTemplate): some request, exactly or one of
its firstAvailable subrequests, names a GPU DeviceClass. Every step is guarded with has().
*/}}
{{- define "gpu-policy-webhook.claimMatchConditions" -}}
{{- $steps := splitList "." (printf "%s.devices.requests" .spec) }}
{{- $prefix := first $steps }}
{{- $guards := list }}
{{- range rest $steps }}
{{- $prefix = printf "%s.%s" $prefix . }}
{{- $guards = append $guards (printf "has(%s)" $prefix) }}
{{- end }}
{{- $exact := include "gpu-policy-webhook.gpuDeviceClass" (dict "name" "r.exactly.deviceClassName" "suffixes" .suffixes) }}
{{- $sub := include "gpu-policy-webhook.gpuDeviceClass" (dict "name" "s.deviceClassName" "suffixes" .suffixes) -}}
- name: asks-for-gpu-device-class
  expression: {{ printf "%s && %s.exists(r, (has(r.exactly) && %s) || (has(r.firstAvailable) && r.firstAvailable.exists(s, %s)))" (join " && " $guards) $prefix $exact $sub | quote }}
{{- end }}

{{/*
The validating webhook entries for DRA (dra.enabled): ResourceClaims and ResourceClaimTemplates
that ask for a GPU DeviceClass, and pods that may use DRA (gpu-policy-webhook.mayUseDra: claims,
deviceclass.resource.kubernetes.io/* names, extended names a DeviceClass may serve) without
asking for an nvidia.com/* resource themselves (those already reach
pods.validate.gpu-policy.io). A pod's claims and extended names name no DeviceClass: the
webhook finds the classes in its snapshot, and leaves other drivers' alone.
*/}}
{{- define "gpu-policy-webhook.claimWebhooks" -}}
{{- $client := include "gpu-policy-webhook.clientConfig" . }}
{{- $common := include "gpu-policy-webhook.commonWebhookFields" .root }}
{{- $suffixes := .root.Values.dra.deviceClassSuffixes -}}
- name: resourceclaims.validate.gpu-policy.io
  {{- $client | nindent 2 }}
  rules:
    - apiGroups: ["resource.k8s.io"]
      apiVersions: ["v1"]
      resources: ["resourceclaims"]
      # The spec of a claim is immutable: CREATE is the one moment to judge it.
      operations: ["CREATE"]
      scope: Namespaced
  matchConditions:
    {{- include "gpu-policy-webhook.claimMatchConditions" (dict "spec" "object.spec" "suffixes" $suffixes) | nindent 4 }}
  {{- $common | nindent 2 }}
- name: resourceclaimtemplates.validate.gpu-policy.io
  {{- $client | nindent 2 }}
  rules:
    - apiGroups: ["resource.k8s.io"]
      apiVersions: ["v1"]
      resources: ["resourceclaimtemplates"]
      operations: ["CREATE"]
      scope: Namespaced
  matchConditions:
    {{- include "gpu-policy-webhook.claimMatchConditions" (dict "spec" "object.spec.spec" "suffixes" $suffixes) | nindent 4 }}
  {{- $common | nindent 2 }}
- name: pod-claims.validate.gpu-policy.io
  {{- $client | nindent 2 }}
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["pods"]
      operations: ["CREATE"]
      scope: Namespaced
  matchConditions:
    - name: may-use-dra
      expression: {{ printf "has(object.spec) && (%s) && !(%s)" (include "gpu-policy-webhook.mayUseDra" "object.spec") (include "gpu-policy-webhook.asksForNvidia" "object.spec") | quote }}
  {{- $common | nindent 2 }}
{{- end }}

{{/*
The webhook entries for the objects with a pod template (workloads, CronJobs, PodTemplates),
for .path "/mutate" or "/validate"; .caBundle as for clientConfig.
*/}}
{{- define "gpu-policy-webhook.workloadWebhooks" -}}
{{- $client := include "gpu-policy-webhook.clientConfig" . }}
{{- $common := include "gpu-policy-webhook.commonWebhookFields" .root }}
{{- $verb := trimPrefix "/" .path }}
{{- /* Templates are patched nowhere: only validation needs what DRA serves. */}}
{{- $dra := and (eq .path "/validate") (include "gpu-policy-webhook.judgesDra" .root) -}}
- name: workloads.{{ $verb }}.gpu-policy.io
  {{- $client | nindent 2 }}
  rules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      resources: ["deployments", "replicasets", "statefulsets", "daemonsets"]
      operations: ["CREATE", "UPDATE"]
      scope: Namespaced
    - apiGroups: ["batch"]
      apiVersions: ["v1"]
      resources: ["jobs"]
      operations: ["CREATE", "UPDATE"]
      scope: Namespaced
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["replicationcontrollers"]
      operations: ["CREATE", "UPDATE"]
      scope: Namespaced
  matchConditions:
    {{- include "gpu-policy-webhook.matchConditions" (dict "root" .root "spec" "object.spec.template.spec" "dra" $dra) | nindent 4 }}
  {{- $common | nindent 2 }}
- name: cronjobs.{{ $verb }}.gpu-policy.io
  {{- $client | nindent 2 }}
  rules:
    - apiGroups: ["batch"]
      apiVersions: ["v1"]
      resources: ["cronjobs"]
      operations: ["CREATE", "UPDATE"]
      scope: Namespaced
  matchConditions:
    {{- include "gpu-policy-webhook.matchConditions" (dict "root" .root "spec" "object.spec.jobTemplate.spec.template.spec" "dra" $dra) | nindent 4 }}
  {{- $common | nindent 2 }}
- name: podtemplates.{{ $verb }}.gpu-policy.io
  {{- $client | nindent 2 }}
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["podtemplates"]
      operations: ["CREATE", "UPDATE"]
      scope: Namespaced
  matchConditions:
    {{- include "gpu-policy-webhook.matchConditions" (dict "root" .root "spec" "object.template.spec" "dra" $dra) | nindent 4 }}
  {{- $common | nindent 2 }}
{{- end }}

{{/* Namespaces no webhook call is made for: kube-system, the release namespace, opt-outs. */}}
{{- define "gpu-policy-webhook.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq | toJson }}
    - key: gpu-policy.io/webhook
      operator: NotIn
      values: ["disabled"]
{{- end }}

{{/* clientConfig for a webhook path; .caBundle is the base64 CA or empty (cert-manager injects it). */}}
{{- define "gpu-policy-webhook.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "gpu-policy-webhook.serviceName" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ .root.Values.service.port }}
  {{- if .caBundle }}
  caBundle: {{ .caBundle }}
  {{- end }}
{{- end }}

{{/* Settings every webhook entry shares. */}}
{{- define "gpu-policy-webhook.commonWebhookFields" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
matchPolicy: Equivalent
failurePolicy: {{ .Values.webhook.failurePolicy }}
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{ include "gpu-policy-webhook.namespaceSelector" . }}
{{- end }}

{{/*
The audit CronJob's name (also its ServiceAccount's and RBAC's): at most 52 characters, the
limit of a CronJob's name (its Jobs add a suffix).
*/}}
{{- define "gpu-policy-webhook.auditName" -}}
{{- printf "%s-audit" (include "gpu-policy-webhook.fullname" . | trunc 46 | trimSuffix "-") }}
{{- end }}

{{/*
Labels of the audit's objects and pods. Not the server's selector labels: the Service, the
PodDisruptionBudget and the NetworkPolicy must never select an audit pod.
*/}}
{{- define "gpu-policy-webhook.auditSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-audit" (include "gpu-policy-webhook.name" . | trunc 57 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-policy-webhook.auditLabels" -}}
{{- include "gpu-policy-webhook.commonLabels" (dict "root" . "selector" (include "gpu-policy-webhook.auditSelectorLabels" .) "component" "audit") }}
{{- end }}

{{/* The report API of audit.reportApi: the group and the two resources RBAC names. */}}
{{- define "gpu-policy-webhook.auditReportRule" -}}
{{- if eq .Values.audit.reportApi "openreports" -}}
- apiGroups: ["openreports.io"]
  resources: ["clusterreports", "reports"]
{{- else -}}
- apiGroups: ["wgpolicyk8s.io"]
  resources: ["clusterpolicyreports", "policyreports"]
{{- end }}
{{- end }}
