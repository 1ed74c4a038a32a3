package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// forbidden are the elements a self-contained page without script has no
// use for: each runs code or loads something.
var forbidden = map[string]bool{
	"script": true, "link": true, "img": true, "iframe": true, "object": true,
	"embed": true, "audio": true, "video": true, "source": true, "base": true,
	"frame": true, "form": true, "image": true, "use": true, "foreignObject": true,
}

// referring are the attributes that name something to load or follow.
var referring = map[string]bool{
	"src": true, "href": true, "srcset": true, "action": true, "poster": true,
	"data": true, "background": true, "formaction": true, "manifest": true,
}

// Check reports whether page is a report as WriteHTML writes it: markup
// that parses as strict XML (every element closed, attributes quoted,
// entities known; WriteHTML writes polyglot HTML), ids unique, no element
// that runs code or loads anything (script, link, img, iframe, …), no
// event-handler attribute, every src or href a fragment of the page
// itself ("#…") whose target exists, and no url() or @import in styles
// except to a fragment. It returns the first problem found.
func Check(page []byte) error {
	if bytes.Contains(page, []byte("ZgotmplZ")) {
		return errors.New("report: the template refused a value (ZgotmplZ)")
	}
	d := xml.NewDecoder(bytes.NewReader(page))
	d.Strict = true
	d.Entity = xml.HTMLEntity
	ids := map[string]bool{}
	var fragments []string
	var inStyle bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("report: not well-formed: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			name := t.Name.Local
			if forbidden[name] {
				return fmt.Errorf("report: <%s> element", name)
			}
			inStyle = name == "style"
			for _, a := range t.Attr {
				an := strings.ToLower(a.Name.Local)
				switch {
				case strings.HasPrefix(an, "on"):
					return fmt.Errorf("report: <%s %s=…>: an event handler", name, an)
				case an == "id":
					if ids[a.Value] {
						return fmt.Errorf("report: id %q twice", a.Value)
					}
					ids[a.Value] = true
				case referring[an]:
					if !strings.HasPrefix(a.Value, "#") {
						return fmt.Errorf("report: <%s %s=%q>: an external reference", name, an, a.Value)
					}
					fragments = append(fragments, a.Value[1:])
				case an == "style":
					if err := checkCSS(a.Value); err != nil {
						return fmt.Errorf("report: <%s style>: %w", name, err)
					}
				}
			}
		case xml.EndElement:
			inStyle = false
		case xml.CharData:
			if inStyle {
				if err := checkCSS(string(t)); err != nil {
					return fmt.Errorf("report: <style>: %w", err)
				}
			}
		}
	}
	for _, f := range fragments {
		if !ids[f] {
			return fmt.Errorf("report: link to #%s, which is not on the page", f)
		}
	}
	return nil
}

// checkCSS refuses style text that loads anything.
func checkCSS(css string) error {
	low := strings.ToLower(css)
	if strings.Contains(low, "@import") {
		return errors.New("@import")
	}
	for rest := low; ; {
		i := strings.Index(rest, "url(")
		if i < 0 {
			return nil
		}
		rest = strings.TrimLeft(rest[i+4:], ` '"`)
		if !strings.HasPrefix(rest, "#") {
			return errors.New("url() to something outside the page")
		}
	}
}
