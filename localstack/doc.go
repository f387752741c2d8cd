// Package localstack is the local stack's wing: what fleet up --stack local
// runs on this machine instead of a cloud, and what the tests run as the
// world around the controller.
//
//   - localcluster: the local control plane (etcd, kube-apiserver,
//     kube-controller-manager, kube-scheduler, kwok, Karpenter) and its real
//     node (a kubelet and containerd that run the managers' pods).
//   - standin: the stand-in gitlab-runner the real node's managers run: it
//     takes jobs from the loopback GitLab and runs them as pods.
//   - gitlabserver: the loopback GitLab (the runner REST API and the runner
//     API's job queue), which fleet runs as a process for the local stack and
//     the tests use as their GitLab.
//
// Only cmd/fleet, cmd/standin-runner, e2e/ and tests import the wing
// (internal/layering): no production package of runnerset/, provisioning/
// or infra/ depends on a stand-in.
package localstack
