// Command scale-worker is the Go side of `stepshim-bench scale`: one k8s.Worker (one informer filtered
// by the worker label) over a namespace holding thousands of step pods, driven line by line on stdin by
// the benchmark, which measures this process's RSS and the apiserver's requests from outside.
//
// It prints one JSON object a line on stdout:
//
//	{"event":"ready","pods":N,"sync_ms":M}           once the first list is in the cache
//	{"event":"tick","pods":N,"collected":[...],"ms":M} after "tick": one GC of the desired set
//	{"event":"watching","name":P}                    after "gone P MS": the waiter is set
//	{"event":"gone","name":P,"ok":B,"noticed_unix_ns":T} when P left the cache (ok false: MS passed)
//	{"event":"error","error":"..."}                  a command that failed; the process goes on
//
// "quit" (or the end of stdin) stops it. The desired set of a GC is prefix0 .. prefix(count-1), so
// every other pod of the worker is garbage; the grace period is zero.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"stepshim.dev/go/k8s"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the worker's credentials")
	namespace := flag.String("namespace", "", "namespace of the step pods")
	worker := flag.String("worker", "", "worker name (the org.concourse-ci.worker label)")
	keyFile := flag.String("key", "", "file holding the worker's key")
	prefix := flag.String("prefix", "", "name prefix of the desired pods")
	count := flag.Int("count", 0, "number of desired pods: prefix0 .. prefix(count-1)")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *worker, *keyFile, *prefix, *count); err != nil {
		fmt.Fprintln(os.Stderr, "scale-worker:", err)
		os.Exit(1)
	}
}

// clientset is k8s.Clientset for the benchmark's kubeconfig, which points at its counting proxy over
// plain HTTP on loopback: clientcmd applies a kubeconfig's user only over TLS, so the token is set
// here from the same file. Everything else is as the kubeconfig says.
func clientset(kubeconfig string) (kubernetes.Interface, error) {
	raw, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	if ctx := raw.Contexts[raw.CurrentContext]; ctx != nil && cfg.BearerToken == "" {
		if user := raw.AuthInfos[ctx.AuthInfo]; user != nil {
			cfg.BearerToken = user.Token
		}
	}
	return kubernetes.NewForConfig(cfg)
}

func emit(out *json.Encoder, v map[string]any) {
	// Encoding a map of strings, numbers and string slices cannot fail; a closed stdout ends the
	// process at the next read of stdin anyway.
	_ = out.Encode(v)
}

func run(kubeconfig, namespace, worker, keyFile, prefix string, count int) error {
	key, err := k8s.KeyFromFile(keyFile)
	if err != nil {
		return err
	}
	cs, err := clientset(kubeconfig)
	if err != nil {
		return err
	}
	start := time.Now()
	w, err := k8s.NewWorker(context.Background(), cs,
		k8s.Config{Namespace: namespace, Worker: worker, Key: key, SyncTimeout: 120 * time.Second})
	if err != nil {
		return err
	}
	defer w.Close()
	out := json.NewEncoder(os.Stdout)
	emit(out, map[string]any{"event": "ready", "pods": len(w.List()),
		"sync_ms": time.Since(start).Milliseconds()})
	desired := make([]string, count)
	for i := range desired {
		desired[i] = prefix + strconv.Itoa(i)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 1 && f[0] == "quit":
			return nil
		case len(f) == 1 && f[0] == "tick":
			t := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			collected, err := w.GC(ctx, desired, 0)
			cancel()
			if err != nil {
				emit(out, map[string]any{"event": "error", "error": err.Error()})
				continue
			}
			if collected == nil {
				collected = []string{}
			}
			emit(out, map[string]any{"event": "tick", "pods": len(w.List()), "collected": collected,
				"ms": time.Since(t).Milliseconds()})
		case len(f) == 3 && f[0] == "gone":
			ms, err := strconv.Atoi(f[2])
			if err != nil {
				emit(out, map[string]any{"event": "error", "error": "gone: bad timeout " + f[2]})
				continue
			}
			emit(out, map[string]any{"event": "watching", "name": f[1]})
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
			err = w.WaitGone(ctx, f[1])
			noticed := time.Now().UnixNano()
			cancel()
			emit(out, map[string]any{"event": "gone", "name": f[1], "ok": err == nil,
				"noticed_unix_ns": noticed})
		default:
			emit(out, map[string]any{"event": "error", "error": "unknown command " + strconv.Quote(in.Text())})
		}
	}
	return in.Err()
}
