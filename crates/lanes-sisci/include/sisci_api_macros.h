/*
 * sisci_api_macros.h - the helper macros of the SISCI headers, as implemented by Lanes.
 *
 * sisci_api.h and sisci_types.h include this file; programs need not include it themselves.
 *
 *  - IN, OUT and IN_OUT annotate parameters (read, written, or both by the call). They
 *    expand to nothing. A program that defines them itself before including a SISCI header
 *    keeps its own definitions.
 *  - SISCI_API_EXPORT marks the API's functions; it expands to nothing here.
 *  - _SISCI_EXPANDE_FUNCTION_NAME(Name) gives the name under which the vendor library
 *    exports a function: _SISCI_PUBLIC_FUNC_MT_Name with _REENTRANT, else
 *    _SISCI_PUBLIC_FUNC_ST_Name. libsisci.so (Lanes) exports every function under both of
 *    these names and its plain name; these headers declare the plain names and do not
 *    rename them, so the macro is only for programs that build such names themselves (to
 *    dlsym them, say).
 */
#ifndef LANES_SISCI_API_MACROS_H
#define LANES_SISCI_API_MACROS_H

#ifndef IN
#define IN
#endif

#ifndef OUT
#define OUT
#endif

#ifndef IN_OUT
#define IN_OUT
#endif

#ifndef SISCI_API_EXPORT
#define SISCI_API_EXPORT
#endif

#if defined(_REENTRANT)
#define _SISCI_EXPANDE_FUNCTION_NAME(name) _SISCI_PUBLIC_FUNC_MT_##name
#define _SISCI_EXPANDE_VARIABLE_NAME(name) _SISCI_PUBLIC_VAR_MT_##name
#else
#define _SISCI_EXPANDE_FUNCTION_NAME(name) _SISCI_PUBLIC_FUNC_ST_##name
#define _SISCI_EXPANDE_VARIABLE_NAME(name) _SISCI_PUBLIC_VAR_ST_##name
#endif
#define _SISCI_EXPANDE_CONSTANT_NAME(name) _SISCI_PUBLIC_CONST_##name

#endif /* LANES_SISCI_API_MACROS_H */
