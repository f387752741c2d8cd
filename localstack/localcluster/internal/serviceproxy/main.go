// Command serviceproxy is the local cluster's one Service route: it carries
// TCP from the kubernetes Service's address (which the real node's pods are
// told, as KUBERNETES_SERVICE_HOST and _PORT) to the API server on
// 127.0.0.1, as kube-proxy would. The bytes pass through untouched: TLS is
// between the pod and the API server, whose certificate names the Service's
// address.
//
//	serviceproxy --listen 10.96.0.1:443 --to 127.0.0.1:6443
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to listen on (the kubernetes Service's ClusterIP:port)")
	to := flag.String("to", "", "address to carry connections to (the API server)")
	flag.Parse()
	if *listen == "" || *to == "" {
		log.Fatal("usage: serviceproxy --listen <ip:port> --to <ip:port>")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("listening on %s: %v", *listen, err)
	}
	log.Printf("carrying %s to %s", *listen, *to)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sigs; ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return // closed by a signal
		}
		go carry(c, *to)
	}
}

func carry(in net.Conn, to string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		log.Printf("%s: dialing %s: %v", in.RemoteAddr(), to, err)
		return
	}
	defer out.Close()
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Add(2)
	go half(out, in)
	go half(in, out)
	wg.Wait()
}
