// Command process is the quota plugin as a process plugin:
//
//	go build -o bin/quota ./process
package main

import (
	"example.com/quota"
	"github.com/ruled-dev/ruled/sdk/process"
)

func main() { process.Serve(quota.New()) }
