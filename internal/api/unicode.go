package api

import (
	"net/http"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// checkUnicode refuses a body that encoding/json would quietly change:
// bytes that are not UTF-8, and \u escapes of half a surrogate pair, each
// of which it turns into U+FFFD. A file's content or a path would then
// differ from what the client sent, and nobody would be told. data is
// known to be one valid JSON value.
func checkUnicode(data []byte) error {
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, size := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			at += size
		}
		return Errorf(http.StatusBadRequest,
			"the body is not UTF-8 (byte offset %d): JSON text must be; send a file's bytes with \"encoding\":\"base64\"", at)
	}
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if data[i+1] != 'u' {
				i++ // \" \\ \n ...: the escaped byte is no quote
				continue
			}
			r := hex4(data[i+2 : i+6])
			if !utf16.IsSurrogate(r) {
				i += 5
				continue
			}
			// A high half followed at once by a low half is one character.
			if r < 0xDC00 && i+12 <= len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
				if lo := hex4(data[i+8 : i+12]); lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
			}
			return Errorf(http.StatusBadRequest,
				"a lone surrogate %s at byte offset %d: JSON strings must be valid Unicode; send a file's bytes with \"encoding\":\"base64\"", data[i:i+6], i)
		}
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape that has parsed.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}
