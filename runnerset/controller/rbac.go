package controller

// The controller's ClusterRole, generated from the markers below into
// runnerset/rbac/role.yaml (make manifests). Each marker names the code that
// needs it; a permission nothing here uses does not belong in this list.

// RunnerSets: the For watch and Reconcile's Get; the finalizer is added and
// removed with a Patch, status is written with one Status().Patch. Owned
// objects get a controller reference with blockOwnerDeletion, which clusters
// running the OwnerReferencesPermissionEnforcement admission plugin allow
// only to who may update runnersets/finalizers.
// +kubebuilder:rbac:groups=runnerfleet.dev,resources=runnersets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=runnerfleet.dev,resources=runnersets/status,verbs=patch
// +kubebuilder:rbac:groups=runnerfleet.dev,resources=runnersets/finalizers,verbs=update

// RunnerClasses: the class step's Get and the watch that requeues RunnerSets;
// the RunnerClass controller (ClassReconciler) patches their status and
// their finalizer (v1alpha1.ClassFinalizer).
// +kubebuilder:rbac:groups=runnerfleet.dev,resources=runnerclasses,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=runnerfleet.dev,resources=runnerclasses/status,verbs=patch

// Owned objects: watched (Owns), read from the cache and written by apply,
// dry runs included; finalize scales the manager Deployment with a Patch.
// Nothing deletes them: the garbage collector does, through ownerReferences.
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=configmaps;serviceaccounts,verbs=get;list;watch;create;update
// KEDA's ScaledObjects of autoscaled managers (autoscale.go): watched
// (Owns, where the CRD exists), read and written by apply, and deleted
// when a RunnerSet is no longer autoscaled.
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;create;update;delete
// The managers' headless metrics Service of earlier versions is deleted
// (managersStep); they are scraped from their pods.
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update

// The job ServiceAccount of the layout before jobs namespaces, left in the
// team's namespace, is deleted once nothing of that layout runs
// (deleteLegacyJobServiceAccount).
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=delete
// Roles are only watched and deleted (identityStep): the managers'
// Role in the team's namespace, kept only while the layout before jobs
// namespaces runs, and the one earlier versions wrote in the jobs
// namespace. RoleBindings: the managers' binding of the executor's
// ClusterRole is written by apply; those of the Roles above are deleted.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;create;update;delete

// Secrets: watched by metadata (token Secrets requeue their RunnerSets) and
// read from the API server; a created runner's token Secret is written with
// CreateOrUpdate, its settings hash patched, and deleted with the runner;
// the config Secret the managers mount is written by apply; the API token
// Secret carries ReleaseFinalizer, added and removed with a Patch.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete

// Namespaces: finalize reads a RunnerSet's namespace to tell whether a
// missing API token can still be restored. The jobs namespace is written
// by apply, watched and cached by its managed-by label, and deleted by
// finalize once the managers drained.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;update;delete

// Pods: finalize lists a RunnerSet's manager and job pods by metadata; the
// cache watches manager pods by metadata for the drain metrics, and the
// leader watches job pods for the ones a disruption takes away
// (interruptions.go). finalize
// deletes the job pods of a RunnerSet being deleted that no manager pod is
// left to delete (waitForPods, orphans.go), by UID, in its own jobs
// namespace or (jobs of the layout before jobs namespaces) its namespace.
// A ClusterRole cannot name namespaces made at run time; the controller may
// already delete those namespaces, and everything in them with them.
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete

// Metrics: the metrics endpoint (runnerset/metrics.Serving) asks the API
// server who a scraper is (TokenReview) and whether it may get /metrics
// (SubjectAccessReview), as controller-runtime's
// filters.WithAuthenticationAndAuthorization does.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Cost: the metrics' Nodes collector counts each RunnerSet's nodes from a
// cache of the nodes' metadata (runnerset/metrics.NodeCache); it writes
// nothing.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch

// Capacity: apply (dry run first) creates and updates it, deleteCapacity
// reads and deletes it, and each kind the cluster has is watched by metadata
// and cached by its managed-by label.
// +kubebuilder:rbac:groups=karpenter.sh,resources=nodepools,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=karpenter.k8s.aws,resources=ec2nodeclasses,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=karpenter.kwok.sh,resources=kwoknodeclasses,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=cloud.google.com,resources=computeclasses,verbs=get;list;watch;create;update;delete

// Events: the Reconciler's recorder (mgr.GetEventRecorder) writes
// events.k8s.io/v1 Events; leader election announces a new leader with a
// core/v1 Event. Both create, then patch a repeated Event.
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Leader election: one Lease in the controller's namespace. A ClusterRole
// grants it in every namespace; bind this one with a ClusterRoleBinding all
// the same, as the rules above are cluster-wide.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// The managers' rights in their jobs namespace: a RoleBinding there to
// the executor's ClusterRole (resources.ExecutorClusterRole, installed
// with the controller by runnerset/install), written by identityStep.
// The API server lets a RoleBinding name a role only to who holds every
// rule of it or may bind it: the controller may bind that one ClusterRole,
// by name, and holds none of the executor's rules (creating pods, exec
// into them, job Secrets) itself. A Role of earlier versions in the jobs
// namespace, and the one in the team's namespace of the layout before jobs
// namespaces, are only deleted. runnerset/rbac's tests fail if this name
// and resources.ExecutorClusterRole drift apart.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=runnerfleet-executor
