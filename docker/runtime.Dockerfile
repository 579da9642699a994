# The runtime image as `npm run images` builds it, with no registry: FROM the base image it made
# (Debian bookworm with bubblewrap, nats-server, ca-certificates), in a context it stages under
# .cache/images/runtime: this file, prepare-image.sh, the host's node binary, and the app as one
# deterministic tar (so an unchanged checkout is a cache hit for every step).
# The root Dockerfile builds the same image on a machine with a registry.
FROM murmur/base:bookworm
COPY prepare-image.sh /usr/local/lib/murmur-prepare-image.sh
RUN sh /usr/local/lib/murmur-prepare-image.sh && rm /usr/local/lib/murmur-prepare-image.sh
ENV MURMUR_HOME=/var/lib/murmur NODE_ENV=production
WORKDIR /opt/murmur
COPY node /usr/local/bin/node
ADD app.tar /opt/murmur/
USER 1000:1000
