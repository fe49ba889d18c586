# pagefast container images (docs/PACKAGING.md "Containers").
# UNTESTED: no Docker engine runs on the development machines.
#
#   docker build -t pagefast .                  the runtime image (the default target)
#   docker run --gpus all -e PAGEFAST=1 pagefast python train.py
#   docker build --target dist -t pagefast-dist .   only /opt/pagefast, to COPY from
#
# The build stage is Debian 12, the system the test suite and CI run on;
# compat/ keeps every binary on the glibc 2.28 baseline, and the stage fails
# when python/backend/glibc_check.py finds otherwise, so /opt/pagefast can
# be copied into any image with glibc 2.28 or later (NGC PyTorch, RHEL 8/9,
# Ubuntu 20.04..24.04). Only the toolkit's headers are taken from NVIDIA's
# image; nothing links libcuda or libcudart.
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS cuda-headers
# /usr/local/cuda and its include/ are symbolic links: copy what they name.
RUN cp -rL /usr/local/cuda/include /cuda-include

FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      meson ninja-build g++ pkg-config libspdlog-dev libnuma-dev python3 binutils \
 && rm -rf /var/lib/apt/lists/*
COPY --from=cuda-headers /cuda-include /usr/local/cuda/include
WORKDIR /src
COPY . .
# The tests need Catch2 and the fake driver; they run in CI, not here.
RUN meson setup /build --prefix=/opt/pagefast --libdir=lib --buildtype=release -Dtests=false \
 && ninja -C /build \
 && meson install -C /build --no-rebuild \
 && python3 python/backend/glibc_check.py /opt/pagefast/lib/libpagefast.so /opt/pagefast/bin/pagefast-stat \
      /opt/pagefast/libexec/pagefast/pagefast-replay-engine /opt/pagefast/libexec/pagefast/pagefast-numa-report

# Only the install tree: `COPY --from=pagefast-dist /opt/pagefast /opt/pagefast`.
FROM scratch AS dist
COPY --from=build /opt/pagefast /opt/pagefast

# A CUDA runtime image with pagefast in front of NVIDIA's own entrypoint:
# preloaded only when the job sets PAGEFAST=1.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
COPY --from=build /opt/pagefast /opt/pagefast
ENV PATH=/opt/pagefast/bin:${PATH}
ENTRYPOINT ["/opt/pagefast/bin/pagefast-run", "--if-enabled", "--", "/opt/nvidia/nvidia_entrypoint.sh"]
CMD ["bash"]
