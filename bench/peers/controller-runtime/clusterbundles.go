package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// The distributor (--cluster-bundles) serves a ClusterConfigBundle the way reflector,
// replicator and Kyverno's generate rules serve theirs: it writes each selected
// namespace's ConfigMap itself, with no object of its own per namespace. Its keys are
// (namespace, ClusterConfigBundle) pairs, so its workers write different namespaces at
// once; a namespace event brings that namespace's pairs, a ClusterConfigBundle's new
// generation brings every namespace's. A ConfigMap is written only when its content,
// labels or annotations differ from the template's; one that is not controlled by the
// ClusterConfigBundle is never touched and counts as failed. A second controller counts
// the namespaces from the cache and writes the status at most once a second.
const (
	labelClusterBundle = "cbop.dev/cluster-bundle"
	reasonAllReady     = "AllNamespacesReady"
	reasonPending      = "NamespacesPending"
	reasonFailing      = "NamespacesFailing"
	statusInterval     = time.Second
	maxFailedListed    = 20
)

// Distributor writes one ClusterConfigBundle's ConfigMap into every selected namespace.
type Distributor struct {
	client.Client
	Scheme *runtime.Scheme

	mu sync.Mutex
	// failed: ClusterConfigBundle name -> namespace -> why it cannot be served.
	failed map[string]map[string]FailedNamespace
	// changed tells the status writer that a bundle's failures changed.
	changed chan event.GenericEvent
}

func clusterConfigMapName(b *ClusterConfigBundle) string {
	if b.Spec.Template.ConfigMapName != "" {
		return b.Spec.Template.ConfigMapName
	}
	return b.Name
}

// desired is the ConfigMap every selected namespace gets: the template's data, its
// labels and annotations, the labels cbop's own copies carry and the content hash.
func desired(b *ClusterConfigBundle, namespace string) *corev1.ConfigMap {
	t := b.Spec.Template
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: clusterConfigMapName(b), Namespace: namespace,
		Labels: map[string]string{}, Annotations: map[string]string{},
	}}
	for k, v := range t.Labels {
		cm.Labels[k] = v
	}
	cm.Labels[labelManagedBy] = managedByValue
	cm.Labels[labelBundle] = b.Name
	cm.Labels[labelClusterBundle] = b.Name
	for k, v := range t.Annotations {
		cm.Annotations[k] = v
	}
	cm.Annotations[annotationHash] = contentHash(t.Data, t.BinaryData)
	cm.Data = copyStrings(t.Data)
	if len(t.BinaryData) > 0 {
		cm.BinaryData = make(map[string][]byte, len(t.BinaryData))
		for k, v := range t.BinaryData {
			cm.BinaryData[k] = append([]byte(nil), v...)
		}
	}
	return cm
}

// selects reports whether the namespace is selected (and not being deleted).
func selects(sel labels.Selector, ns *corev1.Namespace) bool {
	return ns.DeletionTimestamp.IsZero() && sel.Matches(labels.Set(ns.Labels))
}

// current reports whether cm already carries what want says, so nothing is written.
func current(cm, want *corev1.ConfigMap) bool {
	for k, v := range want.Labels {
		if cm.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if cm.Annotations[k] != v {
			return false
		}
	}
	return equality.Semantic.DeepEqual(cm.Data, want.Data) &&
		equality.Semantic.DeepEqual(cm.BinaryData, want.BinaryData)
}

func (d *Distributor) setFailed(bundle, namespace string, f *FailedNamespace) {
	d.mu.Lock()
	before, had := d.failed[bundle][namespace]
	switch {
	case f == nil:
		delete(d.failed[bundle], namespace)
	default:
		if d.failed == nil {
			d.failed = map[string]map[string]FailedNamespace{}
		}
		if d.failed[bundle] == nil {
			d.failed[bundle] = map[string]FailedNamespace{}
		}
		d.failed[bundle][namespace] = *f
	}
	changed := (f == nil && had) || (f != nil && (!had || before != *f))
	d.mu.Unlock()
	if changed {
		select {
		case d.changed <- event.GenericEvent{Object: &ClusterConfigBundle{ObjectMeta: metav1.ObjectMeta{Name: bundle}}}:
		default: // full: a later event brings the status writer anyway
		}
	}
}

func (d *Distributor) failures(bundle string) []FailedNamespace {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]FailedNamespace, 0, len(d.failed[bundle]))
	for _, f := range d.failed[bundle] {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

// Reconcile brings one namespace's copy of one ClusterConfigBundle in line: request
// {Namespace: the namespace, Name: the ClusterConfigBundle}.
func (d *Distributor) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b ClusterConfigBundle
	if err := d.Get(ctx, types.NamespacedName{Name: req.Name}, &b); err != nil {
		// Gone: the garbage collector follows the owner references.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !b.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&b.Spec.NamespaceSelector)
	if err != nil {
		return ctrl.Result{}, nil // an invalid selector selects nothing
	}
	var ns corev1.Namespace
	selected := false
	if err := d.Get(ctx, types.NamespacedName{Name: req.Namespace}, &ns); err == nil {
		selected = selects(sel, &ns)
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	want := desired(&b, req.Namespace)
	var cm corev1.ConfigMap
	err = d.Get(ctx, client.ObjectKeyFromObject(want), &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	exists := err == nil
	if !selected {
		d.setFailed(b.Name, req.Namespace, nil)
		if exists && metav1.IsControlledBy(&cm, &b) {
			return ctrl.Result{}, client.IgnoreNotFound(d.Delete(ctx, &cm))
		}
		return ctrl.Result{}, nil
	}
	if exists && !metav1.IsControlledBy(&cm, &b) {
		d.setFailed(b.Name, req.Namespace, &FailedNamespace{
			Namespace: req.Namespace, Reason: reasonConflict,
			Message: fmt.Sprintf("ConfigMap %s exists and is not controlled by this ClusterConfigBundle", want.Name),
		})
		return ctrl.Result{}, nil
	}
	d.setFailed(b.Name, req.Namespace, nil)
	if exists && current(&cm, want) {
		return ctrl.Result{}, nil
	}
	if !exists {
		if err := controllerutil.SetControllerReference(&b, want, d.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		err := d.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache: not labelled as ours (someone else's), or not seen yet.
			d.setFailed(b.Name, req.Namespace, &FailedNamespace{
				Namespace: req.Namespace, Reason: reasonConflict,
				Message: fmt.Sprintf("ConfigMap %s exists and is not controlled by this ClusterConfigBundle", want.Name),
			})
			return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	for k, v := range want.Labels {
		cm.Labels[k] = v
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	for k, v := range want.Annotations {
		cm.Annotations[k] = v
	}
	cm.Data, cm.BinaryData = want.Data, want.BinaryData
	return ctrl.Result{}, d.Update(ctx, &cm)
}

// namespacesOf maps a ClusterConfigBundle to a request per namespace in the cache.
func (d *Distributor) namespacesOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var namespaces corev1.NamespaceList
	if err := d.List(ctx, &namespaces); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(namespaces.Items))
	for i := range namespaces.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{
			Namespace: namespaces.Items[i].Name, Name: obj.GetName(),
		}})
	}
	return out
}

// bundlesFor maps a namespace to a request per ClusterConfigBundle in the cache.
func (d *Distributor) bundlesFor(ctx context.Context, obj client.Object) []reconcile.Request {
	var bundles ClusterConfigBundleList
	if err := d.List(ctx, &bundles); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(bundles.Items))
	for i := range bundles.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{
			Namespace: obj.GetName(), Name: bundles.Items[i].Name,
		}})
	}
	return out
}

// copyOf maps one of the distributed ConfigMaps to its (namespace, bundle) request.
func copyOf(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[labelClusterBundle]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// ownerOf maps one of the distributed ConfigMaps to its ClusterConfigBundle's request.
func ownerOf(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[labelClusterBundle]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// StatusWriter counts a ClusterConfigBundle's namespaces from the cache and writes the
// status when the counts change, at most once per statusInterval.
type StatusWriter struct {
	client.Client
	Distributor *Distributor

	mu   sync.Mutex
	last map[string]time.Time
}

// Reconcile writes one ClusterConfigBundle's status (request: {Name}).
func (s *StatusWriter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b ClusterConfigBundle
	if err := s.Get(ctx, req.NamespacedName, &b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var namespaces corev1.NamespaceList
	if err := s.List(ctx, &namespaces); err != nil {
		return ctrl.Result{}, err
	}
	failed := s.Distributor.failures(b.Name)
	failing := map[string]bool{}
	for _, f := range failed {
		failing[f.Namespace] = true
	}
	want := contentHash(b.Spec.Template.Data, b.Spec.Template.BinaryData)
	name := clusterConfigMapName(&b)
	counts := NamespaceCounts{}
	sel, err := metav1.LabelSelectorAsSelector(&b.Spec.NamespaceSelector)
	if err != nil {
		sel = labels.Nothing()
	}
	for i := range namespaces.Items {
		ns := &namespaces.Items[i]
		if !selects(sel, ns) {
			continue
		}
		counts.Selected++
		if failing[ns.Name] {
			counts.Failed++
			continue
		}
		var cm corev1.ConfigMap
		err := s.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: name}, &cm)
		if err == nil && metav1.IsControlledBy(&cm, &b) && cm.Annotations[annotationHash] == want {
			counts.Ready++
		}
	}
	status := b.Status.DeepCopyClusterStatus()
	status.ObservedGeneration = b.Generation
	status.Namespaces = counts
	status.FailedNamespaces = nil
	if len(failed) > maxFailedListed {
		failed = failed[:maxFailedListed]
	}
	status.FailedNamespaces = append(status.FailedNamespaces, failed...)
	cond := metav1.Condition{
		Type: conditionReady, Status: metav1.ConditionTrue, Reason: reasonAllReady,
		ObservedGeneration: b.Generation,
		Message:            fmt.Sprintf("%d of %d selected namespaces ready", counts.Ready, counts.Selected),
	}
	switch {
	case counts.Failed > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, reasonFailing
	case counts.Ready < counts.Selected:
		cond.Status, cond.Reason = metav1.ConditionFalse, reasonPending
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if equality.Semantic.DeepEqual(status, b.Status) {
		return ctrl.Result{}, nil
	}
	s.mu.Lock()
	wait := statusInterval - time.Since(s.last[b.Name])
	s.mu.Unlock()
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	b.Status = status
	if err := s.Status().Update(ctx, &b); err != nil {
		return ctrl.Result{}, err
	}
	s.mu.Lock()
	if s.last == nil {
		s.last = map[string]time.Time{}
	}
	s.last[b.Name] = time.Now()
	s.mu.Unlock()
	return ctrl.Result{}, nil
}

// DeepCopyClusterStatus returns a copy of the status for comparison.
func (in *ClusterConfigBundleStatus) DeepCopyClusterStatus() ClusterConfigBundleStatus {
	var out ClusterConfigBundleStatus
	in.DeepCopyInto(&out)
	return out
}

// SetupClusterBundles adds the distributor (workers concurrent reconciles) and the
// status writer to the manager.
func SetupClusterBundles(mgr ctrl.Manager, workers int) error {
	d := &Distributor{
		Client: mgr.GetClient(), Scheme: mgr.GetScheme(),
		changed: make(chan event.GenericEvent, 1024),
	}
	newGeneration := builder.WithPredicates(predicate.GenerationChangedPredicate{})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("clusterconfigbundle-distributor").
		Watches(&ClusterConfigBundle{}, handler.EnqueueRequestsFromMapFunc(d.namespacesOf), newGeneration).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(d.bundlesFor)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(copyOf)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(d)
	if err != nil {
		return err
	}
	s := &StatusWriter{Client: mgr.GetClient(), Distributor: d}
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusterconfigbundle-status").
		For(&ClusterConfigBundle{}, newGeneration).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(s.allBundles)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(ownerOf)).
		WatchesRawSource(source.Channel(d.changed, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(s)
}

// allBundles maps any event to a request per ClusterConfigBundle in the cache.
func (s *StatusWriter) allBundles(ctx context.Context, _ client.Object) []reconcile.Request {
	var bundles ClusterConfigBundleList
	if err := s.List(ctx, &bundles); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(bundles.Items))
	for i := range bundles.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: bundles.Items[i].Name}})
	}
	return out
}
