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
	./cmd/tether ./cmd/tether-runner ./cmd/tether-provider-local

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

# The controller with the local provider and the runner it starts (found next to /tether).
# Busybox gives local-provider workspaces a shell. It runs as an unprivileged user; /data is its.
FROM scratch AS controller
COPY --from=rootfs /rootfs/controller/ /
COPY --from=build /out/tether /out/tether-provider-local /out/tether-runner /
ENV PATH=/bin TETHER_DATA=/data TETHER_ADDR=http://127.0.0.1:7420
USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 7420
ENTRYPOINT ["/tether", "serve", "--listen", "0.0.0.0:7420", "--data", "/data"]
