# The install tree as a user gets it: tests/test_install_consumer.sh installs
# this build into a staging directory and builds tests/consumer/ against it
# through pkg-config and find_package(tsdf), shared and static.
#
# Not in sanitizer or fuzzing builds: their libtsdf is instrumented, and a
# consumer built without the same flags cannot link or load it.
if(NOT TSDF_ASAN AND NOT TSDF_FUZZ)
  add_test(NAME install_consumer
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_install_consumer.sh ${CMAKE_COMMAND}
            ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${CMAKE_C_COMPILER} ${PROJECT_VERSION})
  set_tests_properties(install_consumer PROPERTIES TIMEOUT 300 LABELS install)
endif()
