// Package certs gives tandem-webhook its serving certificate, from one of two sources:
//
//   - SelfSigned makes its own CA and serving certificate, keeps them in one Secret that every replica
//     shares, renews them before they expire, and keeps the caBundle of the webhook's
//     Mutating/ValidatingWebhookConfigurations equal to that CA, as Koordinator's koord-manager does.
//     Nothing else needs installing in the cluster.
//   - Files serves a certificate and key from files, as cert-manager writes them into a mounted Secret
//     (with cert-manager's CA injector keeping the caBundle), and rereads them when they change.
//
// Both hand the certificate to a tls.Config through GetCertificate, so a renewal takes effect on the next
// TLS handshake without a restart.
//
// # The Secret
//
// The Secret (type kubernetes.io/tls) holds tls.crt and tls.key, the serving certificate and key, and
// ca.crt and ca.key, the CA. ca.crt may hold several CAs, newest first: the one whose key is ca.key, and
// older ones not yet expired. Replicas agree through the API server's optimistic concurrency: each reads
// the Secret, writes it only when something must change (Create when absent, Update with the
// resourceVersion it read), and on AlreadyExists or Conflict reads it again and serves what the winner
// wrote. SelfSigned owns the Secret: a CA put there by hand with its key in ca.key (PKCS #8, EC or RSA) is
// used as is, but a serving certificate without a usable ca.key beside it is replaced.
//
// Serving certificates are renewed when less than a third of their validity remains; so is the CA. A new
// CA goes into ca.crt ahead of the old one, and the serving certificate moves to it only once every named
// webhook configuration carries the new bundle and ten minutes have passed, so that API servers, which
// read webhook configurations through a watch and may lag, trust the new certificate before any replica
// presents it. The old CA stays in ca.crt until it expires, so a replica still presenting a certificate
// it signed keeps being trusted.
//
// # RBAC
//
// The Deployment's service account needs exactly these rules; list and watch are for the watch on the one
// Secret (a list or watch whose field selector names one object is authorized against resourceNames),
// create cannot be restricted by name:
//
//	# Role in the webhook's namespace
//	- apiGroups: [""]
//	  resources: [secrets]
//	  resourceNames: [<Config.SecretName>]
//	  verbs: [get, list, watch, update]
//	- apiGroups: [""]
//	  resources: [secrets]
//	  verbs: [create]
//	# ClusterRole
//	- apiGroups: [admissionregistration.k8s.io]
//	  resources: [mutatingwebhookconfigurations, validatingwebhookconfigurations]
//	  resourceNames: [<the names in Config>]
//	  verbs: [get, update]
//
// Files needs no API access.
//
// # Metrics
//
// RegisterMetrics exposes tandem_webhook_certificate_expiration_timestamp_seconds, the NotAfter of the
// certificate being served (Unix seconds; 0 before one is loaded), named after cert-manager's
// certmanager_certificate_expiration_timestamp_seconds so that the same alert fits both sources.
package certs
