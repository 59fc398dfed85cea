package main

import (
	"context"
	"errors"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/leader"
)

// elect runs work while this replica leads, as the README shows.
func elect(ctx context.Context, clientset kubernetes.Interface, o options) error {
	elector, err := leader.New(leader.Config{
		Client:        clientset,
		Namespace:     o.namespace,
		LeaseName:     o.lease,
		Identity:      o.id,
		LeaseDuration: o.leaseDuration,
		RenewDeadline: o.renewDeadline,
		RetryPeriod:   o.retry,
		Endpoint:      &leader.EndpointConfig{Service: o.service, Address: o.address},
	})
	if err != nil {
		return err
	}
	err = elector.Run(ctx, func(ctx context.Context) error {
		return work(ctx, clientset, o.namespace)
	})
	if errors.Is(err, leader.ErrLeadershipLost) {
		os.Exit(1) // a fresh standby, restarted by the kubelet
	}
	return err
}
