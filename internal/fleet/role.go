package fleet

import "github.com/fastover/fastover/leader"

// LeaderRole is the Role the leader library asks for (leader.PolicyRules),
// with an endpoint and services patch (for --remove-selector): replicas
// run with a kubeconfig bound to exactly this (cluster.Env.KubeconfigFor)
// prove it is enough.
var LeaderRole = leader.PolicyRules(&leader.EndpointConfig{RemoveSelector: true})
