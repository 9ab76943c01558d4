# `make install` (PREFIX, DESTDIR): lpo in <prefix>/bin, its config groups in <prefix>/share/lpo/conf and
# the tracer library in <prefix>/lib/lpo, where the installed lpo looks for them (relative to its own
# location: src/config/compose.c, src/probe/probe_client.c), so it runs from any folder.
include(GNUInstallDirs)
install(TARGETS lpo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/conf/ DESTINATION ${CMAKE_INSTALL_DATADIR}/lpo/conf)
install(FILES ${CMAKE_SOURCE_DIR}/examples/prompts.jsonl DESTINATION ${CMAKE_INSTALL_DATADIR}/lpo/examples)
if(LPO_HAVE_PROBE)
  install(TARGETS lpo_probe LIBRARY DESTINATION lib/lpo) # fixed: lpo looks in ../lib/lpo
endif()
