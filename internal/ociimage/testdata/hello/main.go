// hello is the binary the ociimage tests put into an image and run again.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("hello from", os.Args[0], os.Args[1:])
}
