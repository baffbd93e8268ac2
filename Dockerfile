# Tether's two images, built from source:
#
#   docker build --target runner     -t tether-runner .
#   docker build --target controller -t tether-controller .
#
# Both are FROM scratch: static Go binaries plus Debian's static busybox for a shell. Where no
# registry is reachable, `make images` (.ci/images) builds the same two out of ./bin without
# pulling anything.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ \
	./cmd/tether ./cmd/tether-runner ./cmd/tether-provider-local ./cmd/tether-provider-docker

# Root filesystems for both images: busybox with a symlink per applet, /tmp, CA certificates
# (runners may dial an https controller) and a passwd naming the controller's unprivileged user.
# Each is copied whole into its image, so modes and owners (/tmp 1777, /data 0700) carry over.
FROM debian:bookworm-slim AS rootfs
RUN apt-get update \
	&& DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends busybox-static ca-certificates \
	&& rm -rf /var/lib/apt/lists/*
RUN set -eu; \
	base=/rootfs/base; \
	mkdir -p $base/bin $base/etc/ssl/certs $base/tmp; \
	chmod 1777 $base/tmp; \
	cp /bin/busybox $base/bin/busybox; \
	for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$base/bin/$a"; done; \
	cp /etc/ssl/certs/ca-certificates.crt $base/etc/ssl/certs/; \
	printf 'root:x:0:0:root:/root:/bin/sh\ntether:x:65532:65532:tether:/data:/bin/sh\n' >$base/etc/passwd; \
	printf 'root:x:0:\ntether:x:65532:\n' >$base/etc/group; \
	cp -a $base /rootfs/runner; \
	mkdir /rootfs/runner/workspace; \
	cp -a $base /rootfs/controller; \
	mkdir -m 700 /rootfs/controller/data; \
	chown 65532:65532 /rootfs/controller/data

# The runner: the agent inside a sandbox, with a shell and the usual tools for the commands it runs.
FROM scratch AS runner
COPY --from=rootfs /rootfs/runner/ /
COPY --from=build /out/tether-runner /tether-runner
ENV PATH=/bin
WORKDIR /workspace
CMD ["/tether-runner"]

# The controller with its providers (found next to /tether): Docker, for a controller given the
# host's Docker socket (deploy/compose), and local with the runner it starts, which in a container
# runs only with isolation=none (README, "Running it for real"). It runs as an unprivileged user;
# /data is its. The data directory comes from TETHER_DATA, so a deployment can move it (the
# Docker provider needs it at the same path on the host and in the container).
FROM scratch AS controller
COPY --from=rootfs /rootfs/controller/ /
COPY --from=build /out/tether /out/tether-provider-local /out/tether-provider-docker /out/tether-runner /
ENV PATH=/bin TETHER_DATA=/data TETHER_ADDR=http://127.0.0.1:7420
USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 7420
ENTRYPOINT ["/tether", "serve", "--listen", "0.0.0.0:7420"]
