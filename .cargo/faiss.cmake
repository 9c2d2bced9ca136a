# A CMake toolchain file for faiss, which the faiss-sys crate compiles from source (its build
# script runs CMake through the cmake crate, which reads CMAKE_TOOLCHAIN_FILE from the
# environment; .cargo/config.toml sets it). faiss-sys asks for a Release build, -O3: -O1 halves
# the compile time (faiss/IndexIVFPQ.cpp: 27.5 s at -O3, 13.8 s at -O1 on this machine's kind),
# and the packer's k-means spends its time in OpenBLAS's matrix products, compiled elsewhere
# (the build and packing times with each are in docs/results/2026-12-04-feedback-loop.md).
# The cache entry is set first, so the compiler's defaults (-O3) do not replace it.
set(CMAKE_CXX_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "faiss at -O1" FORCE)
set(CMAKE_C_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "faiss at -O1" FORCE)
