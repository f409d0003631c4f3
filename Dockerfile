# The `peer` command in a container: a static binary on an empty base image,
# run as a non-root user. Configure it with flags (replace CMD) or with
# environment variables: every `peer run` flag --NAME is also SUPERPEER_NAME
# in capitals with _ for - (SUPERPEER_BOOTSTRAP, SUPERPEER_IDENTITY_SEED, …),
# the command line winning. See README.md, "Containers and clusters".
#
#   docker build -t superpeer/peer .                          # the default target: scratch, non-root
#   docker build -t superpeer/peer:netem --target netem .     # the same binary with tc, for deploy/compose
#   docker run --rm -p 4001:4001 -p 4001:4001/udp -p 8080:8080 superpeer/peer
#
# GO_IMAGE may name another builder (a mirror, or a pinned digest), and
# NETEM_BASE the netem target's Debian base.
ARG GO_IMAGE=golang:1.26-bookworm
ARG NETEM_BASE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: a static binary that needs no libc in the final image (Go's
# own DNS resolver reads the /etc/resolv.conf the runtime mounts). The
# binary runs once here, so a broken build fails the image build.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o /out/peer ./cmd/peer \
 && /out/peer id --identity-seed build-check >/dev/null \
 && mkdir -p /out/data

# netem: the same binary on Debian with iproute2, for a test bed that delays
# its own traffic (deploy/compose). It starts as root with NET_ADMIN only to
# run `tc qdisc replace dev eth0 root netem $NETEM` (NETEM empty: no
# delay), then runs the peer as 65532:65532 with no capabilities.
FROM ${NETEM_BASE} AS netem
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/peer /peer
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
ENV NETEM="delay 40ms 10ms distribution normal"
EXPOSE 4001/tcp 4001/udp 8080/tcp 9090/tcp
ENTRYPOINT ["/bin/sh", "-c", "set -e; if [ -n \"$NETEM\" ]; then tc qdisc replace dev eth0 root netem $NETEM; echo \"netem on eth0: $NETEM\"; fi; exec setpriv --reuid=65532 --regid=65532 --clear-groups /peer \"$@\"", "peer"]
CMD ["run", "--listen", "/ip4/0.0.0.0/tcp/4001,/ip4/0.0.0.0/udp/4001/quic-v1", "--http", "0.0.0.0:8080", "--metrics", "0.0.0.0:9090"]

# The default target.
FROM scratch
COPY --from=build /out/peer /peer
# /data is the working directory, writable by the peer's user: the default
# --key peer.key is made and kept there (mount a volume to keep the ID).
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER 65532:65532
# libp2p over TCP and QUIC; /status (--http); Prometheus metrics (--metrics).
EXPOSE 4001/tcp 4001/udp 8080/tcp 9090/tcp
ENTRYPOINT ["/peer"]
CMD ["run", "--listen", "/ip4/0.0.0.0/tcp/4001,/ip4/0.0.0.0/udp/4001/quic-v1", "--http", "0.0.0.0:8080", "--metrics", "0.0.0.0:9090"]
