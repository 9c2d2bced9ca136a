# The peer's balancer image, as its Dockerfile.lb's runtime stage (distroless/cc-debian12) but
# FROM scratch with a static binary. Context: build-fraud/lb (made by docker/peer/build.sh in the source dir): lb.
FROM scratch
COPY lb /lb
ENV PORT=9999 FD_UPSTREAMS=/run/sock/api1.sock,/run/sock/api2.sock WORKERS=2
EXPOSE 9999
ENTRYPOINT ["/lb"]
