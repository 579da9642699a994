# The runtime image (murmur/runtime) for machines with a container registry: `docker compose up`
# on a clean clone builds it from this file. Without a registry, `npm run images` builds the same
# image from the host's build instead (docker/runtime.Dockerfile); both have the same layout:
#
#   /usr/local/bin/node   Node 20
#   /opt/murmur           the app: package.json files, built dist/, drivers/dist (store, transpiled), docker/
#                         scripts, and node_modules pruned to the runtime's production closure
#                         (scripts/images.mjs --stage-only computes it from package-lock.json)
#   uid/gid 1000 murmur   home /var/lib/murmur (MURMUR_HOME); /var/lib/murmur{,/registry} and
#                         /data owned by it
#
# Build: docker build -t murmur/runtime:latest .

# ---- build: npm ci, npm run build, then stage the app exactly as `npm run images` does
FROM node:20-bookworm-slim AS build
# A C compiler and static glibc for murmur-confine, the sandbox's native helper (npm run build).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The manifests first, so a source change does not invalidate the dependency install.
COPY package.json package-lock.json ./
COPY wit/package.json wit/
COPY shared/package.json shared/
COPY services/roost/package.json services/roost/
COPY services/stager/package.json services/stager/
COPY services/executor/package.json services/executor/
COPY services/door/package.json services/door/
COPY services/watcher/package.json services/watcher/
COPY cli/package.json cli/
COPY tools/guest-kit/package.json tools/guest-kit/
COPY test/package.json test/
# --ignore-scripts: the root `prepare` script would build before the sources are here (the build
# runs below); no runtime dependency has an install script.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
RUN npm run build \
 && node scripts/images.mjs --stage-only \
 && mkdir /app \
 && tar -xf .cache/images/runtime/app.tar -C /app

# ---- runtime
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap ca-certificates nats-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY docker/prepare-image.sh /usr/local/lib/murmur-prepare-image.sh
RUN sh /usr/local/lib/murmur-prepare-image.sh && rm /usr/local/lib/murmur-prepare-image.sh
ENV MURMUR_HOME=/var/lib/murmur NODE_ENV=production
WORKDIR /opt/murmur
COPY --from=build /usr/local/bin/node /usr/local/bin/node
COPY --from=build /app/ /opt/murmur/
USER 1000:1000
