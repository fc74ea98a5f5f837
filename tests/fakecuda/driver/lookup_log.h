// FAKECUDA_LOOKUP_LOG: one line per driver lookup (`name version flags`), per call of an entry
// point the fake does not implement (`unsupported NAME called`) and per export table or slot it
// does not serve (`cuGetExportTable UUID ...`). Thread-safe; the variable is read at each line,
// so a test can point it elsewhere at any time.
#pragma once

namespace fakecuda {

// Appends `line` (without its newline) when FAKECUDA_LOOKUP_LOG names a file.
void AppendToLookupLog(const char* line);

}  // namespace fakecuda
