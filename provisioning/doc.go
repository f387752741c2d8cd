// Package provisioning holds what runs the fleets that are not RunnerSets:
// the shared fleet (manager groups whose jobs run on autoscaled cloud VMs)
// and the VM fleet (managers on VMs, with their drain agent, rotation and
// garbage collection), with the Prometheus files they ship. Its packages
// are pure builders and operations; the Pulumi program (infra/) declares
// what they build, and the command-line tools (cmd/) run what they operate.
// The local stack's control plane, stand-in runner and GitLab are a wing of
// their own, localstack/.
//
// Nothing of a RunnerSet lives here: every object a RunnerSet owns, its
// capacity included, is built under runnerset/. The imports point one way:
// infra/ and cmd/ import provisioning/, which may import runnerset/, never
// the reverse.
package provisioning
