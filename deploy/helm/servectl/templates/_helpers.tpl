{{/*
Names. The release "servectl" gives "servectl-controller" for every namespaced object and
the cluster-wide ones; any other release name gets the chart's name added.
*/}}
{{- define "servectl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "servectl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The controller's Deployment, Service, ServiceAccount and RBAC objects. */}}
{{- define "servectl.controller" -}}
{{- printf "%s-controller" (include "servectl.fullname" .) }}
{{- end }}

{{- define "servectl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "servectl.controller" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "servectl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "servectl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "servectl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "servectl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: servectl
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "servectl.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the controller watches every namespace. */}}
{{- define "servectl.clusterWide" -}}
{{- if not .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
What the controller may do where it manages ModelServices: exactly the verbs its code uses
(docs/deploy.md explains each; tests/integration/k8s/test_deploy_manifests.py runs the
controller under these rules). Shared by the ClusterRole (cluster-wide) and the Roles of
the watched namespaces. Gateway API routes only when traffic moves through a Gateway.
*/}}
{{- define "servectl.controllerRules" -}}
- apiGroups: ["servectl.io"]
  resources: ["modelservices"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["servectl.io"]
  resources: ["modelservices/status"]
  verbs: ["patch"]
- apiGroups: ["servectl.io"]
  resources: ["modelservices/finalizers"]
  verbs: ["update"]
- apiGroups: ["servectl.io"]
  resources: ["scalingpolicies"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
{{- if eq .Values.traffic.provider "gateway" }}
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes", "grpcroutes"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* The label matchers that pick the controller's own scrape targets in the alerts. */}}
{{- define "servectl.controllerSelector" -}}
{{- default (printf "job=%q" (include "servectl.controller" .)) .Values.prometheusRule.controllerSelector }}
{{- end }}

{{/* Refuse combinations the schema cannot express. */}}
{{- define "servectl.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled: two controllers without a lease would fight over the same ModelServices" }}
{{- end }}
{{- if eq (int .Values.ports.probe) (int .Values.ports.metrics) }}
{{- fail "ports.probe and ports.metrics must differ" }}
{{- end }}
{{- end }}
