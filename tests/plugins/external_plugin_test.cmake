# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK=... -DSTRATA=... -P external_plugin_test.cmake
# Installs strata's headers into a fresh prefix, builds tests/plugins/external_plugin against
# that prefix alone, and checks that `strata devices --plugin` loads the result.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/prefix --component strata_headers
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/prefix/include/strata/device.h)
  message(FATAL_ERROR "installing the headers failed (${rc})")
endif()
# The plugin's source is copied next to the installed headers: the project sees no source tree.
file(COPY ${SOURCE_DIR}/tests/plugins/fake_backend_plugin.cpp DESTINATION ${WORK}/src)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/plugins/external_plugin -B ${WORK}/build
                        -DSTRATA_PREFIX=${WORK}/prefix -DFAKE_PLUGIN_SOURCE=${WORK}/src/fake_backend_plugin.cpp
                        -DCMAKE_CXX_COMPILER_LAUNCHER=
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the external plugin failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the external plugin failed:\n${out}\n${err}")
endif()
execute_process(COMMAND ${STRATA} devices --plugin ${WORK}/build/libstrata-backend-external.so
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "external +[^\n]*libstrata-backend-external.so +ABI 1.0 +score 3")
  message(FATAL_ERROR "strata devices did not load the external plugin (${rc}):\n${out}\n${err}")
endif()
message(STATUS "external plugin loaded:\n${out}")
