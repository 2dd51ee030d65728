# Run at install time (packaging/CMakeLists.txt) over the installed README
# and docs/. They link to repository files that no package installs beside
# them (daemon/default_config.toml, examples/consumer, ...): under
# /usr/share/doc such a link is dead. Each one becomes its text, which names
# the file (`packaging/CMakeLists.txt`); links to the web, to anchors and to
# what is installed stay. In: bulkhead_docdir, the installed docs' folder.
file(GLOB_RECURSE docs "${bulkhead_docdir}/*.md")
foreach(doc IN LISTS docs)
  file(READ "${doc}" text)
  get_filename_component(dir "${doc}" DIRECTORY)
  # A link is [text](target), the target without blanks (a lambda in a code
  # sample, [&](const Context& why), has them); no ';', a CMake list's separator.
  string(REGEX MATCHALL "\\[[^];\n]*\\]\\([^);\t\n ]+\\)" links "${text}")
  list(REMOVE_DUPLICATES links)
  set(changed FALSE)
  foreach(link IN LISTS links)
    string(REGEX REPLACE "^\\[(.*)\\]\\((.*)\\)$" "\\1" label "${link}")
    string(REGEX REPLACE "^\\[(.*)\\]\\((.*)\\)$" "\\2" target "${link}")
    string(REGEX REPLACE "#.*$" "" path "${target}")
    if(path STREQUAL "" OR path MATCHES "^[a-z]+:" OR EXISTS "${dir}/${path}")
      continue()
    endif()
    string(REPLACE "${link}" "${label}" text "${text}")
    set(changed TRUE)
  endforeach()
  if(changed)
    file(WRITE "${doc}" "${text}")
  endif()
endforeach()
