# The sandbox image for clusters that can pull from a registry. It gives the
# same result as the offline build in e2e/hack/sandbox-image.sh (used for
# kind here): Debian with python3 (not python3-minimal, which lacks most of
# the standard library) and the static sandbox binary, run as uid 65532.
#
#   docker build -t <your-registry>/sandbox:<tag> --build-arg VERSION=<tag> .
#   sandbox manifests --image <your-registry>/sandbox:<tag> | kubectl apply -f -

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/sandboxd/sandbox/modes.version=${VERSION}" \
      -o /out/sandbox .

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd -g 65532 sandbox \
 && useradd -u 65532 -g 65532 -M -d /nonexistent -s /usr/sbin/nologin sandbox
COPY --from=build /out/sandbox /usr/local/bin/sandbox
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["/usr/local/bin/sandbox"]
CMD ["run"]
