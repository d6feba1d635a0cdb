// Command kube-network-policies runs the NetworkPolicy controller of
// sigs.k8s.io/kube-network-policies (pinned in go.mod) as a host process of the test cluster,
// authenticating with a kubeconfig: the project's own command reads only the in-cluster
// service-account files of a DaemonSet pod. Built by tests/cluster/build-netpol, started by
// tests/cluster/up (netpol.sh), which also sends the pods' new connections to its nfqueue.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the controller's apiserver user (required)")
	node := flag.String("hostname-override", "", "name of this Node (required): only its pods are enforced")
	queue := flag.Int("nfqueue-id", 100, "nfqueue number the packets to decide are sent to")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *node, *queue); err != nil {
		fmt.Fprintf(os.Stderr, "kube-network-policies: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfig, node string, queue int) error {
	if kubeconfig == "" || node == "" {
		return fmt.Errorf("--kubeconfig and --hostname-override are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// SIGTERM as well as SIGINT: the controller's deferred cleanup (its nftables table) runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(), nil, nil, nil, nil,
		networkpolicy.Config{
			QueueID:  queue,
			NodeName: node,
			// The NRI plugin stays on although containerd's NRI is off in this cluster (it fails
			// to connect, and pod addresses come from the apiserver only): v0.8.0 looks an
			// address up in the plugin whenever no pod has it, which with NRIdisabled is a nil
			// pointer and a crash on the first packet to or from the node.
			NRIdisabled: false,
			// Only for kernels before 6.12, and it needs nftables' queue expression.
			NetfilterBug1766Fix: false,
		})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return ctrl.Run(ctx)
}
