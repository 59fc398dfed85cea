{{/* Labels of every object: fastover's, and helm's. */}}
{{- define "fastover.labels" -}}
app.kubernetes.io/part-of: fastover
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The webhook's image: by digest if given, else by tag (default appVersion). */}}
{{- define "fastover.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The rule, as the keys of the ConfigMap fastover-rule (toleration.ParseRuleData). */}}
{{- define "fastover.ruleData" -}}
tolerationSeconds: {{ int64 .Values.rule.tolerationSeconds | toString | quote }}
{{- if not (kindIs "invalid" .Values.rule.notReadyTolerationSeconds) }}
notReadyTolerationSeconds: {{ int64 .Values.rule.notReadyTolerationSeconds | toString | quote }}
{{- end }}
{{- if kindIs "invalid" .Values.rule.defaultTolerationSeconds }}
defaultTolerationSeconds: "300"
{{- else }}
defaultTolerationSeconds: {{ int64 .Values.rule.defaultTolerationSeconds | toString | quote }}
{{- end }}
{{- end -}}

{{/* The rule's volume (the ConfigMap as a directory) and its mount, for the webhook and the reconciler. */}}
{{- define "fastover.ruleMount" -}}
- name: rule
  mountPath: /etc/fastover/rule
  readOnly: true
{{- end -}}
{{- define "fastover.ruleVolume" -}}
- name: rule
  configMap:
    name: fastover-rule
{{- end -}}

{{/* The pods' security context, as the restricted Pod Security Standard wants it. */}}
{{- define "fastover.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "fastover.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The serving certificate's name (cert-manager), for cainjector. */}}
{{- define "fastover.servingCertificate" -}}fastover-webhook{{- end -}}
