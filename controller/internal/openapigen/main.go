// Command openapigen writes the controller's API spec (go generate in controller/).
package main

import (
	"fmt"
	"os"

	"github.com/tetherhq/tether/controller"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: openapigen FILE")
		os.Exit(2)
	}
	doc, err := controller.OpenAPI()
	if err == nil {
		err = os.WriteFile(os.Args[1], doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}
