# help2man bolds an option's names only where a comma and a space part
# them ("-h, --help"); CLI11 prints "-h,--help", which help2man leaves half
# bold: \fB\-h\fR,\-\-help. This bolds the long name too and puts in the
# space, as in every GNU page. Run with sed -E on help2man's output.
s/\\fR,\\-\\-(([[:alnum:]]|\\-)+)/\\fR, \\fB\\-\\-\1\\fR/g
