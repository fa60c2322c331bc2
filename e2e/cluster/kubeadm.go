package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// What `kubeadm init` leaves in a cluster for `kubeadm join` to work, made here by hand because
// this cluster's control plane is not kubeadm's: a bootstrap token, the signed cluster-info, the
// kubeadm-config and kubelet-config ConfigMaps, and the RBAC that lets a joining node's kubelet
// get its client certificate through a CertificateSigningRequest (TLS bootstrap) and renew it
// (rotation). Names are kubeadm's, so the node sees what it sees on a kubeadm cluster.
const (
	// bootstrapGroup is the group of the token's user, as kubeadm names it.
	bootstrapGroup = "system:bootstrappers:kubeadm:default-node-token"
	// ClientCertLifetime is how long the certificates the controller manager signs for a
	// joining kubelet last (--cluster-signing-duration; kubeadm's default is a year). kubelet renews
	// at 70-90 % of it, so on the VM node it rotates every three minutes or so and tandem-proxy,
	// which acts with the node's kubelet.conf, outlives the certificate it started with within a
	// run of the VM tier.
	ClientCertLifetime = 4 * time.Minute
)

// bootstrapToken is a kubeadm bootstrap token, "<id>.<secret>".
type bootstrapToken struct{ ID, Secret string }

func (t bootstrapToken) String() string { return t.ID + "." + t.Secret }

func newBootstrapToken() (bootstrapToken, error) {
	id, err := randomHex(3)
	if err != nil {
		return bootstrapToken{}, err
	}
	secret, err := randomHex(8)
	if err != nil {
		return bootstrapToken{}, err
	}
	return bootstrapToken{ID: id, Secret: secret}, nil
}

// caCertHash is kubeadm's --discovery-token-ca-cert-hash of the CA certificate in caFile: the
// SHA-256 of its Subject Public Key Info.
func caCertHash(caFile string) (string, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("read CA certificate: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", caFile, err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// kubeadmJoinPrerequisites creates in the cluster what `kubeadm init` would have for `kubeadm
// join` with token: everything is created or left as it is, so it may run again.
func kubeadmJoinPrerequisites(ctx context.Context, cs kubernetes.Interface, tok bootstrapToken, endpoint, caFile string, kubelet kubeletv1beta1.KubeletConfiguration) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read CA certificate: %w", err)
	}
	info := clientcmdapi.NewConfig()
	info.Clusters[""] = &clientcmdapi.Cluster{Server: endpoint, CertificateAuthorityData: ca}
	infoYAML, err := runtimeEncode(info)
	if err != nil {
		return err
	}
	kubelet.TypeMeta = metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"}
	kubeletYAML, err := yaml.Marshal(kubelet)
	if err != nil {
		return fmt.Errorf("encode kubelet configuration: %w", err)
	}
	clusterCfg := fmt.Sprintf("apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: kubernetes\nkubernetesVersion: %s\ncontrolPlaneEndpoint: %s\ncertificatesDir: /etc/kubernetes/pki\nnetworking:\n  dnsDomain: cluster.local\n  serviceSubnet: 10.96.0.0/16\n",
		KubernetesVersion, endpointHostPort(endpoint))
	objs := []func() error{
		func() error {
			_, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + tok.ID, Namespace: metav1.NamespaceSystem},
				Type:       corev1.SecretTypeBootstrapToken,
				StringData: map[string]string{
					"token-id": tok.ID, "token-secret": tok.Secret,
					"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
					"auth-extra-groups": bootstrapGroup,
					"expiration":        time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
				},
			}, metav1.CreateOptions{})
			return err
		},
		// The controller manager's bootstrapsigner adds the token's signature to it.
		func() error {
			_, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: metav1.NamespacePublic},
				Data:       map[string]string{"kubeconfig": string(infoYAML)},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: metav1.NamespaceSystem},
				Data:       map[string]string{"ClusterConfiguration": clusterCfg},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "kubelet-config", Namespace: metav1.NamespaceSystem},
				Data:       map[string]string{"kubelet": string(kubeletYAML)},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			return ensureRole(ctx, cs, metav1.NamespacePublic, "kubeadm:bootstrap-signer-clusterinfo", "configmaps", "cluster-info", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "system:anonymous"})
		},
		func() error {
			return ensureRole(ctx, cs, metav1.NamespaceSystem, "kubeadm:nodes-kubeadm-config", "configmaps", "kubeadm-config", groupSubject(bootstrapGroup), groupSubject("system:nodes"))
		},
		func() error {
			return ensureRole(ctx, cs, metav1.NamespaceSystem, "kubeadm:kubelet-config", "configmaps", "kubelet-config", groupSubject(bootstrapGroup), groupSubject("system:nodes"))
		},
		func() error {
			return ensureClusterRoleBinding(ctx, cs, "kubeadm:kubelet-bootstrap", "system:node-bootstrapper", groupSubject(bootstrapGroup))
		},
		func() error {
			return ensureClusterRoleBinding(ctx, cs, "kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", groupSubject(bootstrapGroup))
		},
		func() error {
			return ensureClusterRoleBinding(ctx, cs, "kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", groupSubject("system:nodes"))
		},
		func() error {
			if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:get-nodes"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
			}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			return ensureClusterRoleBinding(ctx, cs, "kubeadm:get-nodes", "kubeadm:get-nodes", groupSubject(bootstrapGroup))
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create what kubeadm join needs: %w", err)
		}
	}
	return nil
}

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// ensureRole creates a Role that may get one named object and binds it to subjects.
func ensureRole(ctx context.Context, cs kubernetes.Interface, ns, name, resource, object string, subjects ...rbacv1.Subject) error {
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, ResourceNames: []string{object}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func ensureClusterRoleBinding(ctx context.Context, cs kubernetes.Interface, name, role string, subjects ...rbacv1.Subject) error {
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func runtimeEncode(cfg *clientcmdapi.Config) ([]byte, error) {
	b, err := runtime.Encode(clientcmdlatest.Codec, cfg)
	if err != nil {
		return nil, fmt.Errorf("encode cluster-info kubeconfig: %w", err)
	}
	return yaml.JSONToYAML(b)
}

// endpointHostPort strips the scheme of an https:// URL.
func endpointHostPort(url string) string {
	const p = "https://"
	if len(url) > len(p) && url[:len(p)] == p {
		return url[len(p):]
	}
	return url
}

// vmKubeletConfiguration is the KubeletConfiguration the cluster hands a joining node through
// kubeadm's kubelet-config ConfigMap: kubeadm's defaults for a Debian node (the systemd cgroup
// driver, kubelet's default failCgroupV1, client certificate rotation), and image garbage
// collection on, with a maximum age.
func vmKubeletConfiguration(caFile string) kubeletv1beta1.KubeletConfiguration {
	return kubeletv1beta1.KubeletConfiguration{
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: caFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:             kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		CgroupDriver:              "systemd",
		ClusterDNS:                []string{"10.96.0.10"},
		ClusterDomain:             "cluster.local",
		RotateCertificates:        true,
		StaticPodPath:             "/etc/kubernetes/manifests",
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 5 * time.Second},
		// Images unused this long go at kubelet's next collection (every 5 minutes), whatever the
		// disk: an imported image that nothing pins is gone within a run of the VM tier.
		ImageMaximumGCAge: metav1.Duration{Duration: 3 * time.Minute},
	}
}
