// Package providertest is the contract every tether provider must pass.
// A provider author runs it against the real plugin binary, through
// go-plugin, exactly as the controller loads it:
//
//	func TestContract(t *testing.T) {
//		bin := providertest.Build(t, "example.com/me/cmd/tether-provider-mine", "tether-provider-mine", "")
//		providertest.Run(t, func(t *testing.T) provider.Provider {
//			return providertest.OpenPlugin(t, bin)
//		}, providertest.Env{Config: provider.Config{StateDir: t.TempDir()}})
//	}
//
// The suite hands the provider a stand-in runner (./fakerunner) that reports
// what it was started with to a fake controller, which listens on 127.0.0.1
// (the controller URL) and, like the real controller, on a unix socket
// (CreateRequest.ControllerSocket). A provider's runner must reach one of
// them: the host's loopback (host networking), or the socket, which a
// provider whose sandbox has a network of its own mounts into it and names
// in TETHER_CONTROLLER_URL as unix://PATH.
package providertest
