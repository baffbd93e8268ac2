// Command tether is Tether's controller (`tether serve`) and its operator CLI.
package main

//go:generate go run . docs ../..
