//! `#[derive(Message)]`: the code behind `nodeipc_queue::Message` for a
//! `#[repr(C)]` struct or a field-less `#[repr(u8 | u16 | …)]` enum.
//!
//! For a struct it writes every field at its offset into a zeroed buffer
//! (so padding leaves as zeros, never as whatever the stack held) and
//! checks every `bool` and enum field of a received copy, naming the field
//! and its offset; a struct whose fields are all plain data and that has no
//! padding is marked plain, and the queue copies it as it is. For an enum it
//! writes the discriminant and checks that a received one is declared.
//!
//! Paths in the generated code start at `::nodeipc_queue` (the crate that
//! re-exports this derive), so a user needs no other dependency; a crate
//! that renamed it says so with `#[message(crate = "path")]`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Expr, Fields, Ident, Type, parse_macro_input};

/// Derives `nodeipc_queue::Message`; see that trait's documentation.
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let krate = crate_path(input)?;
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new(
            input.generics.span(),
            "Message: generic types are not supported (a queue's message has one layout)",
        ));
    }
    let reprs = reprs(input)?;
    match &input.data {
        Data::Struct(data) => {
            if !reprs.iter().any(|r| r == "C") {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "Message: a struct needs #[repr(C)]: without it the compiler chooses the \
                     field order, and a peer built another way could read other fields",
                ));
            }
            if reprs.iter().any(|r| r == "packed") {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "Message: #[repr(packed)] is not supported (its fields cannot be borrowed)",
                ));
            }
            expand_struct(&krate, &input.ident, &data.fields)
        }
        Data::Enum(data) => {
            let ints = ["u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64"];
            let Some(repr) = reprs.iter().find(|r| ints.contains(&r.as_str())) else {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "Message: an enum needs #[repr(u8)] (or u16, u32, u64, i8, i16, i32, i64): \
                     its discriminant is what crosses the queue",
                ));
            };
            for variant in &data.variants {
                if !matches!(variant.fields, Fields::Unit) {
                    return Err(syn::Error::new(
                        variant.span(),
                        "Message: only field-less enums are supported",
                    ));
                }
            }
            if data.variants.is_empty() {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "Message: an enum without variants has no value to send",
                ));
            }
            let repr = Ident::new(repr, Span::call_site());
            let variants: Vec<&Ident> = data.variants.iter().map(|v| &v.ident).collect();
            Ok(expand_enum(&krate, &input.ident, &repr, &variants))
        }
        Data::Union(_) => Err(syn::Error::new(
            input.ident.span(),
            "Message: unions are not supported (which field is live cannot be checked)",
        )),
    }
}

/// `#[message(crate = "path")]`, else `::nodeipc_queue`.
fn crate_path(input: &DeriveInput) -> syn::Result<TokenStream> {
    let mut path = quote!(::nodeipc_queue);
    for attr in &input.attrs {
        if !attr.path().is_ident("message") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let lit: syn::LitStr = meta.value()?.parse()?;
                path = lit.parse::<syn::Path>()?.into_token_stream();
                Ok(())
            } else {
                Err(meta.error("Message: the only option is `crate = \"path\"`"))
            }
        })?;
    }
    Ok(path)
}

/// The words inside every `#[repr(...)]`.
fn reprs(input: &DeriveInput) -> syn::Result<Vec<String>> {
    let mut found = Vec::new();
    for attr in &input.attrs {
        if !attr.path().is_ident("repr") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if let Some(ident) = meta.path.get_ident() {
                found.push(ident.to_string());
            }
            // `align(N)`: skip its argument.
            if meta.input.peek(syn::token::Paren) {
                let content;
                syn::parenthesized!(content in meta.input);
                let _: TokenStream = content.parse()?;
            }
            Ok(())
        })?;
    }
    Ok(found)
}

/// How a field's type is encoded and checked.
enum Kind<'a> {
    /// `bool`: one byte, 0 or 1.
    Bool,
    /// `[E; N]`: `N` elements of `E`, each as its own kind.
    Array(&'a Type, &'a Expr),
    /// Anything else: its own `Message` implementation.
    Message(&'a Type),
}

fn kind(ty: &Type) -> Kind<'_> {
    match ty {
        Type::Path(p)
            if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "bool") =>
        {
            Kind::Bool
        }
        Type::Array(a) => Kind::Array(&a.elem, &a.len),
        Type::Paren(p) => kind(&p.elem),
        Type::Group(g) => kind(&g.elem),
        other => Kind::Message(other),
    }
}

/// Whether a value of `ty` is plain data (any bytes valid, no padding).
fn plain(krate: &TokenStream, ty: &Type) -> TokenStream {
    match kind(ty) {
        Kind::Bool => quote!(false),
        Kind::Array(elem, _) => plain(krate, elem),
        Kind::Message(ty) => quote!(<#ty as #krate::Message>::PLAIN),
    }
}

/// Writes `value` (an expression of type `&ty`) into `out` (a `&mut [u8]`
/// of its size).
fn encode(krate: &TokenStream, ty: &Type, value: TokenStream, out: TokenStream) -> TokenStream {
    match kind(ty) {
        Kind::Bool => quote! {
            {
                let out: &mut [u8] = #out;
                out[0] = u8::from(*#value);
            }
        },
        Kind::Array(elem, len) => {
            let inner = encode(krate, elem, quote!(item), quote!(chunk));
            quote! {
                {
                    let out: &mut [u8] = #out;
                    let size = ::core::mem::size_of::<#elem>();
                    for (item, chunk) in (#value).iter().zip(out.chunks_exact_mut(size)).take(#len) {
                        #inner
                    }
                }
            }
        }
        Kind::Message(ty) => quote!(<#ty as #krate::Message>::encode(#value, #out);),
    }
}

/// Checks `bytes` (a `&[u8]` of `ty`'s size, at `at` in the message, the
/// field named `name`), returning early with the first invalid value.
fn check(
    krate: &TokenStream,
    ty: &Type,
    bytes: TokenStream,
    name: TokenStream,
    at: TokenStream,
) -> TokenStream {
    match kind(ty) {
        Kind::Bool => quote! {
            {
                let byte = (#bytes)[0];
                if byte > 1 {
                    return ::core::result::Result::Err(#krate::Invalid::new(
                        #name, #at, u64::from(byte), "a bool: 0 or 1",
                    ));
                }
            }
        },
        Kind::Array(elem, len) => {
            let elem_plain = plain(krate, elem);
            let inner = check(
                krate,
                elem,
                quote!(chunk),
                quote!(&::std::format!("{}[{}]", #name, i)),
                quote!(#at + i * size),
            );
            quote! {
                if !(#elem_plain) {
                    let bytes: &[u8] = #bytes;
                    let size = ::core::mem::size_of::<#elem>();
                    for (i, chunk) in bytes.chunks_exact(size).take(#len).enumerate() {
                        #inner
                    }
                }
            }
        }
        Kind::Message(ty) => quote! {
            if !<#ty as #krate::Message>::PLAIN {
                <#ty as #krate::Message>::check(#bytes)
                    .map_err(|e| e.within(#name, #at))?;
            }
        },
    }
}

fn expand_struct(krate: &TokenStream, name: &Ident, fields: &Fields) -> syn::Result<TokenStream> {
    let mut plains = Vec::new();
    let mut sizes = Vec::new();
    let mut encodes = Vec::new();
    let mut checks = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let ty = &field.ty;
        let (member, label) = match &field.ident {
            Some(ident) => (quote!(#ident), ident.to_string()),
            None => {
                let index = syn::Index::from(i);
                (quote!(#index), i.to_string())
            }
        };
        let offset = quote!(::core::mem::offset_of!(Self, #member));
        let size = quote!(::core::mem::size_of::<#ty>());
        plains.push(plain(krate, ty));
        sizes.push(size.clone());
        encodes.push(encode(
            krate,
            ty,
            quote!(&self.#member),
            quote!(&mut out[#offset..#offset + #size]),
        ));
        checks.push(check(
            krate,
            ty,
            quote!(&bytes[#offset..#offset + #size]),
            quote!(#label),
            offset,
        ));
    }
    Ok(quote! {
        // SAFETY: generated for a `#[repr(C)]` struct without generics:
        // `encode` writes each field's bytes at its offset and nothing else
        // (the caller zeroed `out`), `check` accepts only bytes whose every
        // `bool` is 0 or 1 and every nested message checks, and `PLAIN` is
        // true only when every field is plain and the fields fill the
        // struct (no padding).
        unsafe impl #krate::Message for #name {
            const PLAIN: bool = true #(&& #plains)*
                && ::core::mem::size_of::<Self>() == 0 #(+ #sizes)*;

            #[inline]
            fn encode(&self, out: &mut [u8]) {
                #(#encodes)*
            }

            #[inline]
            fn check(bytes: &[u8]) -> ::core::result::Result<(), #krate::Invalid> {
                #(#checks)*
                let _ = bytes;
                ::core::result::Result::Ok(())
            }
        }
    })
}

fn expand_enum(
    krate: &TokenStream,
    name: &Ident,
    repr: &Ident,
    variants: &[&Ident],
) -> TokenStream {
    let expected = format!(
        "one of {}",
        variants
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    quote! {
        // SAFETY: a field-less `#[repr(#repr)]` enum: its bytes are its
        // discriminant, `encode` writes exactly that, and `check` accepts
        // only a declared one; `PLAIN` is false (other values are invalid).
        unsafe impl #krate::Message for #name {
            const PLAIN: bool = false;

            #[inline]
            fn encode(&self, out: &mut [u8]) {
                out.copy_from_slice(&(*self as #repr).to_ne_bytes());
            }

            #[inline]
            fn check(bytes: &[u8]) -> ::core::result::Result<(), #krate::Invalid> {
                let mut raw = [0u8; ::core::mem::size_of::<#repr>()];
                raw.copy_from_slice(bytes);
                let value = #repr::from_ne_bytes(raw);
                if #(value == #name::#variants as #repr)||* {
                    ::core::result::Result::Ok(())
                } else {
                    ::core::result::Result::Err(#krate::Invalid::new(
                        "", 0, value as u64, #expected,
                    ))
                }
            }
        }
    }
}
