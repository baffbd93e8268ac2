// Command tether-runner is the agent inside a sandbox. A provider starts it with the controller's
// URL, its allocation id and a one-use bootstrap token in the environment.
package main
