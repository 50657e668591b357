# The sandbox image for clusters that can pull from a registry. It gives the
# same result as the offline build in e2e/hack/sandbox-image.sh (used for
# kind here): Debian with python3 (not python3-minimal, which lacks most of
# the standard library), numpy, pandas and matplotlib (the packages of
# ROOTFS_SANDBOX_PACKAGES in e2e/hack/lib.sh, without Recommends) and the
# static sandbox binary, run as uid 65532. Matplotlib's font list is built
# here into a read-only tree that the runner links into the pod's writable
# /tmp before its job (SANDBOX_SEED_TMP), where MPLCONFIGDIR points (it
# refuses a read-only one and would rebuild the list on every run).
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
      -ldflags "-s -w -X github.com/sandboxd/sandbox/internal/modes.version=${VERSION}" \
      -o /out/sandbox .

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
      python3-numpy python3-pandas python3-matplotlib \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /usr/share/sandbox/tmp/matplotlib \
 && MPLCONFIGDIR=/usr/share/sandbox/tmp/matplotlib MPLBACKEND=Agg \
      python3 -c 'import numpy, pandas, matplotlib.font_manager, matplotlib.pyplot' \
 && ls /usr/share/sandbox/tmp/matplotlib/fontlist-*.json \
 && chmod -R a+rX /usr/share/sandbox/tmp \
 && groupadd -g 65532 sandbox \
 && useradd -u 65532 -g 65532 -M -d /nonexistent -s /usr/sbin/nologin sandbox
COPY --from=build /out/sandbox /usr/local/bin/sandbox
ENV SANDBOX_SNIPPET_ENV=MPLBACKEND=Agg,MPLCONFIGDIR=/tmp/matplotlib \
    SANDBOX_SEED_TMP=/usr/share/sandbox/tmp
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["/usr/local/bin/sandbox"]
CMD ["run"]
