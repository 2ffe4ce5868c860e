/*
 * sisci_error.h - error codes of the SISCI API, as implemented by Lanes (libsisci.so over a
 * software shared-memory fabric).
 *
 * Every code but SCI_ERR_OK is its number OR SCI_ERR_MASK (0x40000000; the vendor's header
 * also calls it SISCI_ERR_MASK); the numbers of the documented codes are the SISCI ones. The
 * codes marked "Lanes value" have no public number: Lanes picked unused values (0x930-0x93B)
 * for them. SCIGetErrorString() gives a
 * human-readable string for every code, valid for the life of the process; for the code of
 * the calling thread's last failed call it also gives that failure's cause (sisci_api.h,
 * "Errors and their causes").
 */
#ifndef LANES_SISCI_ERROR_H
#define LANES_SISCI_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#define SCI_ERR_MASK 0x40000000
#ifndef SISCI_ERR_MASK
#define SISCI_ERR_MASK SCI_ERR_MASK
#endif

typedef enum {
    SCI_ERR_OK                      = 0x000,
    SCI_ERR_BUSY                    = (0x900 | SCI_ERR_MASK),
    SCI_ERR_FLAG_NOT_IMPLEMENTED    = (0x901 | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_FLAG            = (0x902 | SCI_ERR_MASK),
    SCI_ERR_NOSPC                   = (0x904 | SCI_ERR_MASK),
    SCI_ERR_API_NOSPC               = (0x905 | SCI_ERR_MASK),
    SCI_ERR_HW_NOSPC                = (0x906 | SCI_ERR_MASK),
    SCI_ERR_NOT_IMPLEMENTED         = (0x907 | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_ADAPTERNO       = (0x908 | SCI_ERR_MASK),
    SCI_ERR_NO_SUCH_ADAPTERNO       = (0x909 | SCI_ERR_MASK),
    SCI_ERR_TIMEOUT                 = (0x90A | SCI_ERR_MASK),
    SCI_ERR_OUT_OF_RANGE            = (0x90B | SCI_ERR_MASK),
    SCI_ERR_NO_SUCH_SEGMENT         = (0x90C | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_NODEID          = (0x90D | SCI_ERR_MASK),
    SCI_ERR_CONNECTION_REFUSED      = (0x90E | SCI_ERR_MASK),
    SCI_ERR_SEGMENT_NOT_CONNECTED   = (0x90F | SCI_ERR_MASK),
    SCI_ERR_SIZE_ALIGNMENT          = (0x910 | SCI_ERR_MASK),
    SCI_ERR_OFFSET_ALIGNMENT        = (0x911 | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_PARAMETER       = (0x912 | SCI_ERR_MASK),
    SCI_ERR_MAX_ENTRIES             = (0x913 | SCI_ERR_MASK),
    SCI_ERR_SEGMENT_NOT_PREPARED    = (0x914 | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_ADDRESS         = (0x915 | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_OPERATION       = (0x916 | SCI_ERR_MASK),
    SCI_ERR_ILLEGAL_QUERY           = (0x917 | SCI_ERR_MASK),
    SCI_ERR_SEGMENTID_USED          = (0x918 | SCI_ERR_MASK),
    SCI_ERR_SYSTEM                  = (0x919 | SCI_ERR_MASK),
    SCI_ERR_CANCELLED               = (0x91A | SCI_ERR_MASK),
    SCI_ERR_NOT_CONNECTED           = (0x91B | SCI_ERR_MASK),
    SCI_ERR_NOT_AVAILABLE           = (0x91C | SCI_ERR_MASK),
    SCI_ERR_INCONSISTENT_VERSIONS   = (0x91D | SCI_ERR_MASK),
    SCI_ERR_COND_INT_RACE_PROBLEM   = (0x91E | SCI_ERR_MASK),
    SCI_ERR_OVERFLOW                = (0x91F | SCI_ERR_MASK),
    SCI_ERR_NOT_INITIALIZED         = (0x920 | SCI_ERR_MASK),
    SCI_ERR_ACCESS                  = (0x921 | SCI_ERR_MASK),

    /* Names in use whose numbers are not public: Lanes values. */
    SCI_ERR_NOT_SUPPORTED           = (0x930 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_DEPRECATED              = (0x931 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_DMA_NOT_AVAILABLE       = (0x932 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_DMA_DISABLED            = (0x933 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_EWOULD_BLOCK            = (0x934 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_REMOTE_BUSY             = (0x935 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_LOCAL_BUSY              = (0x936 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_ALL_BUSY                = (0x937 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_NO_SUCH_INTNO           = (0x938 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_SEMAPHORE_COUNT_EXCEEDED = (0x939 | SCI_ERR_MASK), /* Lanes value */
    SCI_ERR_IRQL_ILLEGAL            = (0x93A | SCI_ERR_MASK), /* Lanes value */
    /* SmartIO: no device with this fabric device id (SCIBorrowDevice, SCI_Q_DEVICE). */
    SCI_ERR_NO_SUCH_FDID            = (0x93B | SCI_ERR_MASK), /* Lanes value */

    SCI_ERR_NO_SUCH_NODEID          = (0xA00 | SCI_ERR_MASK),
    SCI_ERR_NODE_NOT_RESPONDING     = (0xA02 | SCI_ERR_MASK),
    SCI_ERR_NO_REMOTE_LINK_ACCESS   = (0xA04 | SCI_ERR_MASK),
    SCI_ERR_NO_LINK_ACCESS          = (0xA05 | SCI_ERR_MASK),
    SCI_ERR_TRANSFER_FAILED         = (0xA06 | SCI_ERR_MASK)
} sci_error_t;

#ifdef __cplusplus
}
#endif

#endif /* LANES_SISCI_ERROR_H */
