# pagefast container image: a multi-stage build on NVIDIA's CUDA images.
# UNTESTED here: no Docker engine runs on the development machines (see
# README). The runtime stage holds only libpagefast.so and pagefast-run; the
# ENTRYPOINT preloads pagefast only when the job opts in with PAGEFAST=1:
#
#   docker run --gpus all -e PAGEFAST=1 pagefast python train.py
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      meson ninja-build g++ pkg-config libspdlog-dev libnuma-dev python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The tests need Catch2 2.x and the fake driver; they run in CI, not here.
RUN meson setup /build --prefix=/usr/local --buildtype=release -Dtests=false \
 && ninja -C /build \
 && DESTDIR=/staging meson install -C /build --no-rebuild

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
COPY --from=build /staging/usr/local/ /usr/local/
RUN ldconfig
ENTRYPOINT ["/usr/local/bin/pagefast-run", "--if-enabled", "--"]
CMD ["bash"]
