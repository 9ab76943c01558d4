# Writes lpo_build_info.h with the git commit of the tree being built. Runs at every build (not only at
# configure time), and rewrites the header only when its content changes, so provenance never goes stale
# and unchanged builds stay incremental. Inputs: SRC, IN, OUT and the @-variables of build_info.h.in.
# Only a checkout whose top level is SRC itself: a tree exported (git archive) into a folder of another
# repository would otherwise be stamped with that repository's commit. Such a tree may carry its commit in
# SRC/.commit (first word), as scripts that send a tree to a GPU machine write it.
execute_process(COMMAND git rev-parse --show-toplevel WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE LPO_GIT_TOP OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
get_filename_component(LPO_SRC_REAL "${SRC}" REALPATH)
if(LPO_GIT_TOP)
  get_filename_component(LPO_GIT_TOP "${LPO_GIT_TOP}" REALPATH)
endif()
set(LPO_GIT_COMMIT "")
set(LPO_GIT_DIRTY "")
if(LPO_GIT_TOP STREQUAL LPO_SRC_REAL)
  execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE LPO_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE LPO_GIT_DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
elseif(EXISTS "${SRC}/.commit")
  file(STRINGS "${SRC}/.commit" LPO_COMMIT_LINES LIMIT_COUNT 1)
  string(REGEX MATCH "^[0-9a-fA-F]+" LPO_GIT_COMMIT "${LPO_COMMIT_LINES}")
  if(LPO_GIT_COMMIT)
    set(LPO_GIT_COMMIT "${LPO_GIT_COMMIT}-export")
  endif()
endif()
if(NOT LPO_GIT_COMMIT)
  set(LPO_GIT_COMMIT "unknown")
elseif(LPO_GIT_DIRTY)
  set(LPO_GIT_COMMIT "${LPO_GIT_COMMIT}-dirty")
endif()
string(REPLACE "," ";" LPO_CUDA_ARCHS "${LPO_CUDA_ARCHS_CSV}")
configure_file(${IN} ${OUT}.tmp @ONLY)
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
