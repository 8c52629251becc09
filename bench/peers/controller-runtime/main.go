// Command controller-runtime-peer is a small controller-runtime operator implementing
// cbop's ConfigBundle contract (and, with --cluster-bundles, distributing a
// ClusterConfigBundle's ConfigMap directly), used by bench/operators as a peer to
// measure against.
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func controllerOptions(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: workers}
}

func main() {
	var namespace, metricsAddr, probeAddr string
	var workers, burst int
	var qps float64
	var sources, secrets, clusterBundles bool
	var resync time.Duration
	flag.StringVar(&namespace, "namespace", "", "namespace to watch (default: all)")
	flag.IntVar(&workers, "workers", 4, "MaxConcurrentReconciles")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "metrics address (0 disables)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "health probe address")
	flag.DurationVar(&resync, "resync-period", 10*time.Hour, "informer resync period (SyncPeriod)")
	flag.Float64Var(&qps, "kube-api-qps", 0, "client QPS (0: controller-runtime's default, no client-side limit)")
	flag.IntVar(&burst, "kube-api-burst", 0, "client burst (0: default)")
	flag.BoolVar(&sources, "sources", false,
		"serve spec.sources: cache ConfigMaps labelled cbop.dev/source=true (a cache of their own) and "+
			"only the managed ConfigMaps (label app.kubernetes.io/managed-by=cbop) in the manager's cache, as cbop does")
	flag.BoolVar(&secrets, "secrets", false,
		"serve Secret targets (spec.target.kind: Secret) and spec.sources[].secret (implies --sources): "+
			"source Secrets in the label-selected source cache, only the managed Secrets in the manager's cache")
	flag.BoolVar(&clusterBundles, "cluster-bundles", false,
		"serve ClusterConfigBundles instead of ConfigBundles: write each selected namespace's ConfigMap "+
			"directly (no ConfigBundle per namespace), caching only the ConfigMaps labelled "+labelClusterBundle)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if secrets {
		sources = true
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("peer")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := schemeBuilder.AddToScheme(scheme); err != nil {
		panic(err)
	}
	cfg := ctrl.GetConfigOrDie()
	if qps != 0 {
		cfg.QPS = float32(qps)
	}
	if burst != 0 {
		cfg.Burst = burst
	}
	cacheOpts := cache.Options{SyncPeriod: &resync}
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	if sources {
		cacheOpts.ByObject = map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{labelManagedBy: managedByValue})},
		}
		if secrets {
			cacheOpts.ByObject[&corev1.Secret{}] = cache.ByObject{
				Label: labels.SelectorFromSet(labels.Set{labelManagedBy: managedByValue}),
			}
		}
	}
	if clusterBundles {
		copies, err := labels.NewRequirement(labelClusterBundle, selection.Exists, nil)
		if err != nil {
			panic(err)
		}
		cacheOpts.ByObject = map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.NewSelector().Add(*copies)},
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	})
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	var sourceCache cache.Cache
	if clusterBundles {
		if err := SetupClusterBundles(mgr, workers); err != nil {
			log.Error(err, "setting up the distributor")
			os.Exit(1)
		}
	} else if sourceCache, err = setupBundles(mgr, cacheOpts, sources, secrets, resync, workers); err != nil {
		log.Error(err, "setting up the controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		panic(err)
	}
	synced := func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced")
		}
		if sourceCache != nil && !sourceCache.WaitForCacheSync(ctx) {
			return errors.New("source cache not synced")
		}
		return nil
	}
	if err := mgr.AddReadyzCheck("informers-synced", synced); err != nil {
		panic(err)
	}
	log.Info("starting", "namespace", namespace, "sources", sources, "secrets", secrets, "clusterBundles", clusterBundles,
		"workers", workers, "qps", cfg.QPS, "burst", cfg.Burst)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager exited")
		os.Exit(1)
	}
}

// setupBundles adds the ConfigBundle controller; with sources, also the label-selected
// cache of source ConfigMaps and (with secrets) Secrets (returned, for the readiness check).
func setupBundles(mgr ctrl.Manager, cacheOpts cache.Options, sources, secrets bool, resync time.Duration, workers int) (cache.Cache, error) {
	r := &BundleReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Secrets: secrets}
	if secrets {
		r.DigestKey = newDigestKey()
	}
	var sourceCache cache.Cache
	if sources {
		sourceOpts := cache.Options{
			Scheme:               mgr.GetScheme(),
			Mapper:               mgr.GetRESTMapper(),
			SyncPeriod:           &resync,
			DefaultLabelSelector: labels.SelectorFromSet(labels.Set{labelSource: "true"}),
			DefaultNamespaces:    cacheOpts.DefaultNamespaces,
		}
		var err error
		if sourceCache, err = cache.New(mgr.GetConfig(), sourceOpts); err != nil {
			return nil, err
		}
		if err := mgr.Add(sourceCache); err != nil {
			return nil, err
		}
		r.Sources = sourceCache
	}
	return sourceCache, r.SetupWithManager(context.Background(), mgr, workers, sourceCache)
}
