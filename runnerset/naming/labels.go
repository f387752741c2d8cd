package naming

// Every label, annotation and cloud tag key runnerfleet writes or selects
// by, defined once. The packages that own what a key means keep a named
// constant for it (resources.LabelRunnerSet, vmfleet.PodLabelManager, …)
// whose value comes from here; no other Go file spells a key
// (TestNoGoFileSpellsAKeyOfLabelsGo). Keys that a module this project
// requires already defines are used from there instead: k8s.io/api/core/v1
// (kubernetes.io/os, kubernetes.io/arch, kubernetes.io/hostname,
// node.alpha.kubernetes.io/ttl, …), sigs.k8s.io/karpenter/pkg/apis/v1
// (karpenter.sh/do-not-disrupt, karpenter.sh/capacity-type,
// karpenter.sh/nodepool) and github.com/aws/karpenter-provider-aws's
// pkg/apis/v1 (its tag keys).
//
// The CEL rules of runnerset/api cannot name a Go constant: they spell
// KeyPrefix, the karpenter.sh/ prefix, AnnotationSafeToEvict,
// LabelComponent and LabelManagedBy, and runnerset/crds'
// TestTheReservedJobPodKeysAreTheKeysOfLabelsGo holds them to these values.

// KeyPrefix begins every key of runnerfleet's own.
const KeyPrefix = "runnerfleet.dev/"

// runnerfleet's own labels.
const (
	// LabelRunnerSet names the RunnerSet an object in its namespace
	// belongs to.
	LabelRunnerSet = "runnerfleet.dev/runnerset"
	// LabelOwnerNamespace and LabelOwnerName tie an object to a RunnerSet
	// that cannot own it through an ownerReference: cluster-scoped
	// capacity, the jobs namespace and what lives in it.
	LabelOwnerNamespace = "runnerfleet.dev/runnerset-namespace"
	LabelOwnerName      = "runnerfleet.dev/runnerset-name"
	// LabelCapacity on a job node (through its NodePool or ComputeClass)
	// names the capacity it belongs to.
	LabelCapacity = "runnerfleet.dev/capacity"
	// LabelNodeRole marks the managers' nodes (runnerset/resources'
	// placement).
	LabelNodeRole = "runnerfleet.dev/node-role"
	// LabelStack names the stack (fleet up, the Pulumi program) that
	// declared an object.
	LabelStack = "runnerfleet.dev/stack"
	// LabelSharedFleetManager names a shared fleet's manager on its pods,
	// so that its metrics and its VMs' can be joined.
	LabelSharedFleetManager = "runnerfleet.dev/manager"
	// LabelRelease names a shared fleet's manager (its Helm release) on its
	// pods and Deployment: what fleet gc's Kubernetes source reads.
	LabelRelease = "runnerfleet.dev/release"
	// LabelIncarnation names the incarnation of a manager whose
	// docker+machine state lives on a volume of its own.
	LabelIncarnation = "runnerfleet.dev/incarnation"
	// LabelRegion names, on a local stack's RunnerSet, the region its team
	// stands for (stack key teams[].region): one machine is one cluster, so
	// an overflow "in another region" is shown by this label alone.
	LabelRegion = "runnerfleet.dev/region"
	// LabelLocalFakeNode marks the local stack's kwok nodes.
	LabelLocalFakeNode = "runnerfleet.dev/local-fake-node"
)

// runnerfleet's own annotations.
const (
	// AnnotationJobsNamespace on the manager pod template names the
	// namespace the managers create job pods in.
	AnnotationJobsNamespace = "runnerfleet.dev/jobs-namespace"
	// AnnotationConfigHash on a pod template rolls its pods when the
	// configuration they read changes (a RunnerSet's managers, a shared
	// fleet's Prometheus and Alertmanager).
	AnnotationConfigHash = "runnerfleet.dev/config-hash"
	// AnnotationIdentityHash on the manager pod template rolls the managers
	// when spec.jobs.identity changes.
	AnnotationIdentityHash = "runnerfleet.dev/identity-hash"
	// AnnotationScaledBy on a RunnerSet's managers' Deployment names what
	// sets its replicas (keda, for spec.managers.autoscale): the controller
	// then never writes them.
	AnnotationScaledBy = "runnerfleet.dev/scaled-by"
	// AnnotationSpecHash records the hash of the desired state an object
	// was written from.
	AnnotationSpecHash = "runnerfleet.dev/spec-hash"
	// AnnotationTokenExpiresAt on a team's token Secret is when its runner
	// authentication token expires (RFC 3339).
	AnnotationTokenExpiresAt = "runnerfleet.dev/token-expires-at"
	// AnnotationIdleTime on a shared fleet manager's pods is the longest
	// IdleTime of its config.toml.
	AnnotationIdleTime = "runnerfleet.dev/idle-time"
)

// FinalizerDrain holds a RunnerSet until its managers have drained, its
// runner is released and its capacity is gone (the RunnerSet controller's
// finalizer path). The controller adds it on a RunnerSet's first pass; an
// API server that serves MutatingAdmissionPolicy adds it at creation
// (runnerset/install.FinalizerPolicy), which saves that write.
const FinalizerDrain = "runnerfleet.dev/drain"

// TagRunnerClass is the cloud tag naming the RunnerClass of a class's
// capacity (an EC2NodeClass's instances).
const TagRunnerClass = "runnerfleet.dev/runner-class"

// Kubernetes' recommended labels (kubernetes.io/docs, "Recommended
// Labels"); k8s.io/api defines no constants for them.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelManagedBy = "app.kubernetes.io/managed-by"
)

// Pod Security admission's namespace labels (k8s.io/pod-security-admission's
// api package, which this module does not require).
const (
	LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"
	LabelPodSecurityWarn    = "pod-security.kubernetes.io/warn"
)

// Keys of cloud integrations and add-ons, whose Go modules this project
// does not require.
const (
	// AnnotationSafeToEvict "false" keeps the cluster autoscaler from
	// removing a pod's node to scale down (k8s.io/autoscaler's
	// cluster-autoscaler, utils/drain).
	AnnotationSafeToEvict = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	// AnnotationIRSA binds a ServiceAccount to an IAM role on EKS
	// (aws/amazon-eks-pod-identity-webhook).
	AnnotationIRSA = "eks.amazonaws.com/role-arn"
	// AnnotationWorkloadIdentity binds a ServiceAccount to a Google service
	// account on GKE (GKE Workload Identity).
	AnnotationWorkloadIdentity = "iam.gke.io/gcp-service-account"
	// AnnotationExternalDNSHostname asks external-dns for a DNS record of a
	// Service (kubernetes-sigs/external-dns, source/annotations).
	AnnotationExternalDNSHostname = "external-dns.alpha.kubernetes.io/hostname"
	// LabelComputeClass selects a GKE ComputeClass (GKE custom compute
	// classes).
	LabelComputeClass = "cloud.google.com/compute-class"
	// LabelGKESpot "true" is on every GKE node that is a Spot VM (GKE's
	// Spot VMs documentation).
	LabelGKESpot = "cloud.google.com/gke-spot"
	// TagKarpenterDiscovery is the tag by which Karpenter's EC2NodeClass
	// selects subnets and security groups (Karpenter's getting-started
	// convention; karpenter-provider-aws defines no constant for it).
	TagKarpenterDiscovery = "karpenter.sh/discovery"
	// AnnotationKwokNode selects the nodes kwok manages
	// (sigs.k8s.io/kwok, not required by this module).
	AnnotationKwokNode = "kwok.x-k8s.io/node"
	// LabelKwokNodeType "kwok" is the node label of kwok's stages and
	// examples, which the local stack's fake nodes carry.
	LabelKwokNodeType = "type"
	// LabelNodeRoleAgent is the node role label the local stack's fake
	// nodes carry (the node-role.kubernetes.io/ convention of kubectl).
	LabelNodeRoleAgent = "node-role.kubernetes.io/agent"
	// LabelHelmChart names the chart and version of a Helm release's
	// objects (Helm's "Labels and Annotations" best practice; helm.sh/helm
	// defines no constant for it).
	LabelHelmChart = "helm.sh/chart"
	// AnnotationPrometheusScrape and AnnotationPrometheusPort are the
	// scrape annotations of Prometheus' kubernetes_sd example
	// configuration.
	AnnotationPrometheusScrape = "prometheus.io/scrape"
	AnnotationPrometheusPort   = "prometheus.io/port"
)

// Keys gitlab-runner's Kubernetes executor puts on job pods (its
// executors/kubernetes package: buildLabels and buildPodAnnotations). The
// job's ID, name and URL are annotations (the local stack's stand-in also
// labels the pod with the ID); the project's ID is both a label, which no
// configuration can overwrite, and an annotation.
const (
	LabelGitLabJobID     = "job.runner.gitlab.com/id"
	LabelGitLabJobName   = "job.runner.gitlab.com/name"
	LabelGitLabJobURL    = "job.runner.gitlab.com/url"
	LabelGitLabProjectID = "project.runner.gitlab.com/id"
)
