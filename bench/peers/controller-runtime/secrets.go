package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The part of cbop's Secret contract (docs/secrets.md) this peer implements for S13, with
// --secrets: spec.target (kind Secret, name, type kept once made), spec.sources[].secret
// from the label-selected source cache with the share-with check, a Secret per bundle
// written with controllerutil.CreateOrUpdate from the managed-Secret cache, and a keyed
// digest (HMAC-SHA256) in status and on the Secret. The key is random per process and
// held in memory only (cbop reads its key from a Secret once per leadership).
const (
	kindSecret            = "Secret"
	secretKeyPrefix       = "secret:"
	reasonSecretConflict  = "SecretConflict"
	reasonSecretsDisabled = "SecretsDisabled"
)

func isSecretTarget(b *ConfigBundle) bool {
	return b.Spec.Target != nil && b.Spec.Target.Kind == kindSecret
}

func secretName(b *ConfigBundle) string {
	if b.Spec.Target != nil && b.Spec.Target.Name != "" {
		return b.Spec.Target.Name
	}
	return b.Name
}

func secretType(b *ConfigBundle) corev1.SecretType {
	if b.Spec.Target != nil && b.Spec.Target.Type != "" {
		return corev1.SecretType(b.Spec.Target.Type)
	}
	return corev1.SecretTypeOpaque
}

// newDigestKey returns 32 random bytes for the keyed digest.
func newDigestKey() []byte {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err)
	}
	return key
}

// secretHash is the keyed digest of Secret content, over contentHash's framing.
func (r *BundleReconciler) secretHash(data map[string][]byte) string {
	return "hmac-sha256:" + hex.EncodeToString(frameDigest(hmac.New(sha256.New, r.DigestKey), nil, data))
}

// composeSecret lays one source Secret over out (its values as bytes, a later layer
// winning a key).
func (r *BundleReconciler) composeSecret(ctx context.Context, b *ConfigBundle, ref *ConfigMapSource, out *composed) *sourceError {
	ns := ref.Namespace
	if ns == "" {
		ns = b.Namespace
	}
	var s corev1.Secret
	if err := r.Sources.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &s); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return &sourceError{reasonInvalidSrc, err.Error()}
		}
		if ref.Optional {
			return nil
		}
		return &sourceError{reasonNotFound, fmt.Sprintf(
			"source Secret %s/%s not found (it needs the label %s: \"true\")", ns, ref.Name, labelSource)}
	}
	if !sharedWith(&s, b.Namespace) {
		return &sourceError{reasonNotShared, fmt.Sprintf(
			"source Secret %s/%s is not shared with namespace %s (annotation %s)",
			ns, ref.Name, b.Namespace, annotationShareWith)}
	}
	if s.Labels[labelManagedBy] == managedByValue {
		return &sourceError{reasonInvalidSrc, fmt.Sprintf("source Secret %s/%s is managed by cbop", ns, ref.Name)}
	}
	name := ns + "/" + ref.Name
	for k, v := range s.Data {
		out.binaryData[k] = v
		delete(out.data, k)
		out.keySources[k] = name
	}
	out.sources = append(out.sources, SourceStatus{Namespace: ns, Name: ref.Name, ContentHash: r.secretHash(s.Data)})
	return nil
}

// secretData is a composed content as one map of bytes (a Secret's data).
func secretData(content *composed) map[string][]byte {
	out := make(map[string][]byte, len(content.data)+len(content.binaryData))
	for k, v := range content.data {
		out[k] = []byte(v)
	}
	for k, v := range content.binaryData {
		out[k] = v
	}
	return out
}

// reconcileSecret brings a bundle's Secret target in line, as Reconcile does a ConfigMap.
func (r *BundleReconciler) reconcileSecret(ctx context.Context, b *ConfigBundle) (ctrl.Result, error) {
	name := secretName(b)
	if !r.Secrets || r.Sources == nil {
		cond := metav1.Condition{
			Type: conditionReady, Status: metav1.ConditionFalse, Reason: reasonSecretsDisabled,
			ObservedGeneration: b.Generation, Message: "Secrets are off (run with --secrets)",
		}
		return ctrl.Result{}, r.writeStatus(ctx, b, cond, name, b.Status.ContentHash, nil)
	}
	content, failed := r.compose(ctx, b)
	if failed != nil {
		cond := metav1.Condition{
			Type: conditionReady, Status: metav1.ConditionFalse, Reason: failed.reason,
			ObservedGeneration: b.Generation, Message: failed.message,
		}
		return ctrl.Result{}, r.writeStatus(ctx, b, cond, name, b.Status.ContentHash, nil)
	}
	data := secretData(content)
	hash := r.secretHash(data)
	cond := metav1.Condition{
		Type: conditionReady, Status: metav1.ConditionTrue, Reason: reasonSynced,
		ObservedGeneration: b.Generation,
		Message:            fmt.Sprintf("Secret %s matches the spec (%d keys, %s)", name, len(data), hash),
	}
	if b.Spec.Suspend {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, reasonSuspended, "suspended"
	} else {
		op, err := r.syncSecret(ctx, b, name, hash, data)
		if err != nil {
			if !apierrors.IsAlreadyExists(err) && err != errNotOwned {
				return ctrl.Result{}, err
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, reasonSecretConflict
			cond.Message = fmt.Sprintf("Secret %s exists and is not controlled by this bundle", name)
		} else if op == controllerutil.OperationResultUpdated && statusCanWait(b, hash) {
			// The Secret's watch event (Owns) brings the bundle back for its status.
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, r.writeStatus(ctx, b, cond, name, hash, content)
}

// syncSecret creates or updates the bundle's Secret from the managed-Secret cache; the
// type is set at creation and kept.
func (r *BundleReconciler) syncSecret(ctx context.Context, b *ConfigBundle, name, hash string, data map[string][]byte) (controllerutil.OperationResult, error) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace}}
	return controllerutil.CreateOrUpdate(ctx, r.Client, s, func() error {
		if s.CreationTimestamp.IsZero() {
			s.Type = secretType(b)
		} else if !metav1.IsControlledBy(s, b) {
			return errNotOwned
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		for k, v := range b.Spec.Labels {
			s.Labels[k] = v
		}
		s.Labels[labelManagedBy] = managedByValue
		s.Labels[labelBundle] = b.Name
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for k, v := range b.Spec.Annotations {
			s.Annotations[k] = v
		}
		s.Annotations[annotationHash] = hash
		s.Data = make(map[string][]byte, len(data))
		for k, v := range data {
			s.Data[k] = append([]byte(nil), v...)
		}
		s.StringData = nil
		return controllerutil.SetControllerReference(b, s, r.Scheme)
	})
}

// readersOfSecret maps a source Secret's event to its readers through the index.
func (r *BundleReconciler) readersOfSecret(ctx context.Context, s *corev1.Secret) []reconcile.Request {
	return r.readersByKey(ctx, secretKeyPrefix+s.Namespace+"/"+s.Name)
}
