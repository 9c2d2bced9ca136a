# A CMake toolchain file for faiss, which the faiss-sys crate compiles from source (its build
# script runs CMake through the cmake crate, which reads CMAKE_TOOLCHAIN_FILE from the
# environment; .cargo/config.toml sets it). Two cuts, neither of which changes a packed index
# (the same artifact bytes as a full -O3 build of faiss):
#
# - -O1, not the -O3 faiss-sys asks for (a Release build): the packer's k-means spends its time
#   in OpenBLAS's matrix products, compiled elsewhere. The cache entry is set first, so the
#   compiler's defaults (-O3) do not replace it.
# - Only the sources k-means over a flat index needs (faiss_kmeans_only below): the whole library
#   (119 files, every index type) took 247 s of the workspace build's 727 s on a 2-core VM, these
#   26 files about 20 s. Rust links with --gc-sections, so the C API's wrappers of what is left
#   out are dropped with the code that would call them. Using another part of faiss from Rust
#   fails to link with an undefined reference: add its source file to the list.
set(CMAKE_CXX_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "faiss at -O1" FORCE)
set(CMAKE_C_FLAGS_RELEASE "-O1 -DNDEBUG" CACHE STRING "faiss at -O1" FORCE)

function(faiss_kmeans_only)
  set(keep
    Clustering Index IndexFlat IndexFlatCodes
    impl/AuxIndexStructures impl/CodePacker impl/FaissException impl/IDSelector impl/kmeans1d
    utils/Heap utils/distances utils/distances_simd utils/extra_distances utils/partitioning
    utils/random utils/sorting utils/utils utils/distances_fused/[a-z_]+
    # The C API the Rust crate calls.
    Clustering_c IndexFlat_c Index_c error_impl impl/AuxIndexStructures_c utils/distances_c
    utils/utils_c)
  list(JOIN keep "|" pattern)
  foreach(target faiss faiss_c)
    if(NOT TARGET ${target})
      continue()
    endif()
    get_target_property(sources ${target} SOURCES)
    set(kept)
    foreach(s IN LISTS sources)
      if(NOT s MATCHES "\\.cpp$" OR s MATCHES "(^|/)(${pattern})\\.cpp$")
        list(APPEND kept ${s})
      endif()
    endforeach()
    set_property(TARGET ${target} PROPERTY SOURCES ${kept})
  endforeach()
endfunction()
# Once faiss's own CMakeLists.txt has defined its targets (this file is read inside its
# `project()`, before them).
cmake_language(DEFER CALL faiss_kmeans_only)
