# Writes lpo_build_info.h with the git commit of the tree being built. Runs at every build (not only at
# configure time), and rewrites the header only when its content changes, so provenance never goes stale
# and unchanged builds stay incremental. Inputs: SRC, IN, OUT and the @-variables of build_info.h.in.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE LPO_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE LPO_GIT_DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT LPO_GIT_COMMIT)
  set(LPO_GIT_COMMIT "unknown")
elseif(LPO_GIT_DIRTY)
  set(LPO_GIT_COMMIT "${LPO_GIT_COMMIT}-dirty")
endif()
string(REPLACE "," ";" LPO_CUDA_ARCHS "${LPO_CUDA_ARCHS_CSV}")
configure_file(${IN} ${OUT}.tmp @ONLY)
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
