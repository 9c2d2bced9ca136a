# The peer's API image, as its Dockerfile's runtime stage (gcr.io/distroless/cc-debian12) but
# FROM scratch: no registry here, and the server is linked statically (glibc, crt-static), so
# it needs no library. Context: build-fraud/api (made by docker/peer/build.sh in the source dir): server, index/blob.bin.
FROM scratch
COPY server /server
COPY index/blob.bin /index/blob.bin
ENV BLOB_PATH=/index/blob.bin BIND=0.0.0.0:8000
EXPOSE 8000
ENTRYPOINT ["/server"]
