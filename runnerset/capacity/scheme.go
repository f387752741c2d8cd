package capacity

import (
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Group versions of the capacity kinds.
var (
	KarpenterGroupVersion = schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	AWSGroupVersion       = schema.GroupVersion{Group: "karpenter.k8s.aws", Version: "v1"}
	KWOKGroupVersion      = schema.GroupVersion{Group: "karpenter.kwok.sh", Version: "v1alpha1"}
)

// AddToScheme registers Karpenter's NodePool and NodeClaim, the EC2NodeClass
// and the KWOKNodeClass. Karpenter's packages register them only in
// client-go's global scheme; runnerfleet keeps a scheme of its own.
func AddToScheme(s *runtime.Scheme) error {
	for gv, types := range map[schema.GroupVersion][]runtime.Object{
		KarpenterGroupVersion: {&karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{}},
		AWSGroupVersion:       {&awsv1.EC2NodeClass{}, &awsv1.EC2NodeClassList{}},
		KWOKGroupVersion:      {&kwokv1alpha1.KWOKNodeClass{}, &kwokv1alpha1.KWOKNodeClassList{}},
	} {
		s.AddKnownTypes(gv, types...)
		metav1.AddToGroupVersion(s, gv)
	}
	return nil
}
