# A CMake toolchain file for faiss, which the faiss-sys crate compiles from source (its build
# script runs CMake through the cmake crate, which reads CMAKE_TOOLCHAIN_FILE from the
# environment; .cargo/config.toml sets it). faiss-sys asks for a Release build, -O3: -O1 halves
# the compile time (faiss/IndexIVFPQ.cpp: 27.5 s at -O3, 13.8 s at -O1 on this machine's kind),
# and the packer's k-means spends its time in OpenBLAS's matrix products, compiled elsewhere
# (the packing times with each are in docs/results/2026-12-04-feedback-loop.md).
set(CMAKE_CXX_FLAGS_RELEASE_INIT "-O1 -DNDEBUG")
set(CMAKE_C_FLAGS_RELEASE_INIT "-O1 -DNDEBUG")
